// Package kafkaflags defines the command-line flags that give a command's
// Kafka clients TLS and SASL, and turns them into franz-go options. The
// commands with a --kafka flag (cmd/sagademo, cmd/sagabench) register
// them, and pass the options to every Kafka client they make: orchestrators
// and workers (WithKafkaOpts), relays, admin clients; sagactl cancel and
// terminate register them for their producer.
//
//	--kafka-tls                   dial the brokers over TLS (the system's roots)
//	--kafka-tls-ca FILE           trust the PEM certificates in FILE instead (implies --kafka-tls)
//	--kafka-tls-cert/-key FILE    present this client certificate (mutual TLS; implies --kafka-tls)
//	--kafka-sasl-user NAME        authenticate with SASL as NAME
//	--kafka-sasl-mechanism M      plain (default), scram-sha-256 or scram-sha-512
//	--kafka-sasl-password-env V   the variable holding the password (default KAFKA_SASL_PASSWORD)
//
// The password is read from the environment, never from a flag, so that it
// does not show in ps.
//
// The same settings are the YAML keys stacksaga.kafka.tls.* and
// stacksaga.kafka.sasl.* beside stacksaga.kafka.brokers (LoadConfigWithEnv,
// which package config calls; orchestrator.WithConfig and worker.WithConfig
// apply them), and EnvBrokers is the brokers' one environment variable
// for every program (DeprecatedEnvBrokers is still read, with
// DeprecationNote).
package kafkaflags

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// DefaultPasswordEnv is the environment variable the SASL password is read
// from unless --kafka-sasl-password-env names another.
const DefaultPasswordEnv = "KAFKA_SASL_PASSWORD"

// SASL mechanisms, as --kafka-sasl-mechanism takes them (in any case).
const (
	Plain       = "plain"
	ScramSHA256 = "scram-sha-256"
	ScramSHA512 = "scram-sha-512"
)

// Flag names.
const (
	FlagTLS         = "kafka-tls"
	FlagTLSCA       = "kafka-tls-ca"
	FlagTLSCert     = "kafka-tls-cert"
	FlagTLSKey      = "kafka-tls-key"
	FlagMechanism   = "kafka-sasl-mechanism"
	FlagUser        = "kafka-sasl-user"
	FlagPasswordEnv = "kafka-sasl-password-env"
)

// Flags are the flags' values, as Register defines them.
type Flags struct {
	TLS               bool
	CAFile            string
	CertFile, KeyFile string
	// Mechanism is empty for the default, plain.
	Mechanism string
	User      string
	// PasswordEnv is empty for DefaultPasswordEnv.
	PasswordEnv string
}

// Register defines the flags on fs and returns their values, read once fs
// has parsed the arguments.
func Register(fs *flag.FlagSet) *Flags {
	f := &Flags{}
	fs.BoolVar(&f.TLS, FlagTLS, false, "dial the Kafka brokers over TLS, verifying them against the system's roots (see --"+FlagTLSCA+")")
	fs.StringVar(&f.CAFile, FlagTLSCA, "", "PEM `file` of the certificates that sign the Kafka brokers' certificates (implies --"+FlagTLS+")")
	fs.StringVar(&f.CertFile, FlagTLSCert, "", "PEM `file` of the client certificate to present to Kafka (mutual TLS; with --"+FlagTLSKey+"; implies --"+FlagTLS+")")
	fs.StringVar(&f.KeyFile, FlagTLSKey, "", "PEM `file` of the private key of --"+FlagTLSCert)
	fs.StringVar(&f.User, FlagUser, "", "authenticate to Kafka with SASL as this `user` (the password comes from the environment: see --"+FlagPasswordEnv+")")
	fs.StringVar(&f.Mechanism, FlagMechanism, "", "SASL `mechanism`: plain (the default), scram-sha-256 or scram-sha-512 (needs --"+FlagUser+")")
	fs.StringVar(&f.PasswordEnv, FlagPasswordEnv, "", "environment `variable` holding the SASL password of --"+FlagUser+" (default "+DefaultPasswordEnv+")")
	return f
}

// TLSOn reports whether the flags ask for TLS.
func (f *Flags) TLSOn() bool {
	return f.TLS || f.CAFile != "" || f.CertFile != "" || f.KeyFile != ""
}

// Requested reports whether any of the flags is set: TLS or SASL asked
// for.
func (f *Flags) Requested() bool {
	return f.TLSOn() || f.User != "" || f.Mechanism != "" || f.PasswordEnv != ""
}

// Warning says what is risky about the settings ("" when nothing is):
// SASL/PLAIN without TLS sends the password in cleartext.
func (f *Flags) Warning() string {
	if f.User != "" && f.mechanism() == Plain && !f.TLSOn() {
		return fmt.Sprintf("--%s with SASL/PLAIN and no --%s: the password goes to the brokers in cleartext", FlagUser, FlagTLS)
	}
	return ""
}

// mechanism is the normalised mechanism name (plain when unset).
func (f *Flags) mechanism() string {
	if f.Mechanism == "" {
		return Plain
	}
	return strings.ToLower(strings.TrimSpace(f.Mechanism))
}

// passwordEnv is the variable the password is read from.
func (f *Flags) passwordEnv() string {
	if f.PasswordEnv == "" {
		return DefaultPasswordEnv
	}
	return f.PasswordEnv
}

// String describes the settings for a command's banner (never the
// password): "plaintext", or "TLS" and/or "SASL/MECHANISM as USER".
func (f *Flags) String() string {
	var parts []string
	if f.TLSOn() {
		parts = append(parts, "TLS")
	}
	if f.User != "" {
		parts = append(parts, fmt.Sprintf("SASL/%s as %s", strings.ToUpper(f.mechanism()), f.User))
	}
	if len(parts) == 0 {
		return "plaintext"
	}
	return strings.Join(parts, ", ")
}

// Opts checks the flags and returns the client options they ask for: nil
// when none is set, else kgo.DialTLSConfig and/or kgo.SASL. The password
// of --kafka-sasl-user is looked up with lookup (os.LookupEnv in the
// commands) at this moment. Every problem is reported, each naming its
// flag: a CA file that cannot be read or holds no certificate, a client
// certificate without its key (or the other way round) or that does not
// load, an unknown mechanism, a mechanism or password variable without a
// user, a user without a password.
func (f *Flags) Opts(lookup func(string) (string, bool)) ([]kgo.Opt, error) {
	var errs []error
	bad := func(flag, format string, args ...any) {
		errs = append(errs, fmt.Errorf("--%s: %s", flag, fmt.Sprintf(format, args...)))
	}
	var opts []kgo.Opt
	if f.TLSOn() {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if f.CAFile != "" {
			pem, err := os.ReadFile(f.CAFile)
			switch {
			case err != nil:
				bad(FlagTLSCA, "%v", err)
			default:
				cfg.RootCAs = x509.NewCertPool()
				if !cfg.RootCAs.AppendCertsFromPEM(pem) {
					bad(FlagTLSCA, "%s holds no PEM certificate", f.CAFile)
				}
			}
		}
		switch {
		case f.CertFile == "" && f.KeyFile == "":
		case f.CertFile == "":
			bad(FlagTLSKey, "needs --%s", FlagTLSCert)
		case f.KeyFile == "":
			bad(FlagTLSCert, "needs --%s", FlagTLSKey)
		default:
			cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
			if err != nil {
				bad(FlagTLSCert, "with --%s: %v", FlagTLSKey, err)
			} else {
				cfg.Certificates = []tls.Certificate{cert}
			}
		}
		opts = append(opts, kgo.DialTLSConfig(cfg))
	}
	var mech func(user, pass string) sasl.Mechanism
	switch m := f.mechanism(); m {
	case Plain:
		mech = func(u, p string) sasl.Mechanism { return plain.Auth{User: u, Pass: p}.AsMechanism() }
	case ScramSHA256:
		mech = func(u, p string) sasl.Mechanism { return scram.Auth{User: u, Pass: p}.AsSha256Mechanism() }
	case ScramSHA512:
		mech = func(u, p string) sasl.Mechanism { return scram.Auth{User: u, Pass: p}.AsSha512Mechanism() }
	default:
		bad(FlagMechanism, "%q: want %s, %s or %s", f.Mechanism, Plain, ScramSHA256, ScramSHA512)
	}
	switch {
	case f.User == "":
		if f.Mechanism != "" {
			bad(FlagMechanism, "needs --%s", FlagUser)
		}
		if f.PasswordEnv != "" {
			bad(FlagPasswordEnv, "needs --%s", FlagUser)
		}
	default:
		pass, _ := lookup(f.passwordEnv())
		if pass == "" {
			hint := ""
			if f.PasswordEnv == "" {
				hint = fmt.Sprintf(" (or name another variable with --%s)", FlagPasswordEnv)
			}
			bad(FlagUser, "no password: set the environment variable %s%s", f.passwordEnv(), hint)
		} else if mech != nil {
			opts = append(opts, kgo.SASL(mech(f.User, pass)))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return opts, nil
}
