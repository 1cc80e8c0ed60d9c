package kafkaflags

import (
	"errors"
	"fmt"
	"strings"

	"github.com/stacksaga-go/stacksaga/internal/yamlconfig"
)

// The brokers' environment variable, the same for every program (the
// services' configuration, sagactl, the examples, the demo, sagabench).
const (
	// EnvBrokers overrides stacksaga.kafka.brokers (comma-separated).
	EnvBrokers = "STACKSAGA_KAFKA_BROKERS"
	// DeprecatedEnvBrokers is the examples' former name, still read when
	// EnvBrokers is unset, with DeprecationNote.
	DeprecatedEnvBrokers = "KAFKA_BROKERS"
	// DefaultBroker is the broker used when neither the file nor the
	// environment names one.
	DefaultBroker = "127.0.0.1:9092"
)

// ErrInvalidConfig is wrapped by every error of LoadConfig.
var ErrInvalidConfig = errors.New("kafka: invalid configuration")

// DeprecationNote is what a program logs (slog) or prints (stderr) when it
// read the brokers from DeprecatedEnvBrokers.
var DeprecationNote = fmt.Sprintf("%s is deprecated: set %s instead (the one name every StackSaga program reads)", DeprecatedEnvBrokers, EnvBrokers)

// EnvBrokersOf returns the brokers the environment names: EnvBrokers, else
// DeprecatedEnvBrokers (deprecated true). ok is false when neither is set.
func EnvBrokersOf(lookup func(string) (string, bool)) (brokers []string, deprecated, ok bool) {
	env := yamlconfig.Env(lookup)
	if v, set := env(EnvBrokers); set {
		return SplitBrokers(v), false, true
	}
	if v, set := env(DeprecatedEnvBrokers); set {
		return SplitBrokers(v), true, true
	}
	return nil, false, false
}

// SplitBrokers splits a comma-separated broker list, dropping blanks.
func SplitBrokers(v string) []string {
	var out []string
	for _, b := range strings.Split(v, ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	return out
}

// Config is the stacksaga.kafka section's connection keys: the brokers and
// the TLS and SASL settings of every Kafka client of the service.
type Config struct {
	// Brokers are the seed brokers (stacksaga.kafka.brokers; default
	// DefaultBroker).
	Brokers []string
	// Client holds TLS and SASL as the command-line flags hold them
	// (stacksaga.kafka.tls.*, stacksaga.kafka.sasl.*).
	Client Flags
	// DeprecatedEnv is set when the brokers came from DeprecatedEnvBrokers.
	DeprecatedEnv bool
}

type configDoc struct {
	Stacksaga struct {
		Kafka struct {
			Brokers []string `yaml:"brokers"`
			TLS     struct {
				Enabled  bool   `yaml:"enabled"`
				CAFile   string `yaml:"ca-file"`
				CertFile string `yaml:"cert-file"`
				KeyFile  string `yaml:"key-file"`
			} `yaml:"tls"`
			SASL struct {
				Mechanism   string `yaml:"mechanism"`
				User        string `yaml:"user"`
				PasswordEnv string `yaml:"password-env"`
			} `yaml:"sasl"`
		} `yaml:"kafka"`
	} `yaml:"stacksaga"`
}

// LoadConfigWithEnv reads the stacksaga.kafka connection keys of the YAML
// document data, EnvBrokers (or DeprecatedEnvBrokers) overriding the
// brokers, and checks the TLS and SASL settings (the SASL password is read
// with lookup from the variable sasl.password-env names, default
// DefaultPasswordEnv). Every problem names its key and wraps
// ErrInvalidConfig.
func LoadConfigWithEnv(data []byte, lookup func(string) (string, bool)) (Config, error) {
	var doc configDoc
	if err := yamlconfig.Decode(data, &doc); err != nil {
		return Config{}, errors.Join(ErrInvalidConfig, err)
	}
	k := doc.Stacksaga.Kafka
	c := Config{Client: Flags{TLS: k.TLS.Enabled, CAFile: k.TLS.CAFile, CertFile: k.TLS.CertFile, KeyFile: k.TLS.KeyFile,
		Mechanism: k.SASL.Mechanism, User: k.SASL.User, PasswordEnv: k.SASL.PasswordEnv}}
	p := yamlconfig.Problems{Prefix: "stacksaga.kafka."}
	for i, b := range k.Brokers {
		if b = strings.TrimSpace(b); b == "" {
			p.Add("brokers", "entry %d is empty", i)
			continue
		}
		c.Brokers = append(c.Brokers, b)
	}
	if env, dep, ok := EnvBrokersOf(lookup); ok {
		c.Brokers, c.DeprecatedEnv = env, dep
	}
	if len(c.Brokers) == 0 {
		c.Brokers = []string{DefaultBroker}
	}
	if _, err := c.Client.Opts(lookup); err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			_, msg, _ := strings.Cut(line, ": ")
			p.Add(keyOfFlag(line), "%s", msg)
		}
	}
	if err := p.Err(ErrInvalidConfig); err != nil {
		return Config{}, err
	}
	return c, nil
}

// keyOfFlag names the YAML key of a problem Opts reported on a flag.
func keyOfFlag(line string) string {
	keys := map[string]string{FlagTLSCA: "tls.ca-file", FlagTLSCert: "tls.cert-file", FlagTLSKey: "tls.key-file",
		FlagMechanism: "sasl.mechanism", FlagUser: "sasl.user", FlagPasswordEnv: "sasl.password-env"}
	flag, _, _ := strings.Cut(strings.TrimPrefix(line, "--"), ":")
	if k, ok := keys[flag]; ok {
		return k
	}
	return "tls"
}
