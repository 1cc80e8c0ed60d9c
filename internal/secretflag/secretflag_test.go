package secretflag

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"strings"
	"testing"
)

func TestCarries(t *testing.T) {
	for v, want := range map[string]bool{
		"postgres://app:s3cret@127.0.0.1:5432/shop":                     true,
		"postgres://app:s3cret@127.0.0.1:5432/shop?sslmode=verify-full": true,
		"postgres://app@127.0.0.1/shop?password=s3cret":                 true,
		"postgres://app@127.0.0.1/shop?sslmode=disable&pass=s3cret":     true,
		"kafka://u:p@127.0.0.1:9092,127.0.0.1:9093":                     true,
		"127.0.0.1:9092,kafka://u:p@127.0.0.1:9093":                     true,
		"postgres://app:s3cr%zzet@127.0.0.1/shop":                       true, // does not parse
		"host=db user=app password=secret dbname=shop":                  true,
		"host=db user=app password = secret dbname=shop":                true,
		"host=db user=app PASSWORD=secret":                              true,
		"host=db password= dbname=shop":                                 true, // libpq: spaces around = are optional
		"password='s3 cret' host=db":                                    true,
		`host=db password='it\'s' dbname=shop`:                          true,
		"host=db pass=secret":                                           true,
		"host=db sslpassword=secret":                                    true,
		"jdbc:sqlserver://db;user=app;pwd=secret":                       true,
		`Server=db;Password="s3cret"`:                                   true,
		"password=secret":                                               true,

		"postgres://app@127.0.0.1:5432/shop?sslmode=verify-full": false,
		"postgres://127.0.0.1/shop":                              false,
		"host=db user=app dbname=shop":                           false,
		"host=db password='' dbname=shop":                        false,
		"127.0.0.1:9092,127.0.0.1:9093":                          false,
		"STACKSAGA_CASSANDRA_PASSWORD":                           false,
		"/run/secrets/password":                                  false,
		"passwordfile=x":                                         false,
		"":                                                       false,
	} {
		if got := Carries(v); got != want {
			t.Errorf("Carries(%q) = %v, want %v", v, got, want)
		}
	}
}

func TestParse(t *testing.T) {
	var out bytes.Buffer
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(&out)
	fs.String("dsn", "", "")
	fs.String("hosts", "", "")
	if err := Parse(fs, []string{"--hosts", "127.0.0.1", "--dsn", "host=db password=planted-s3cret"}); !errors.Is(err, ErrSecret) ||
		!strings.Contains(err.Error(), "--dsn:") || strings.Contains(err.Error(), "--hosts") {
		t.Fatalf("Parse = %v, want ErrSecret naming --dsn only", err)
	}
	if s := out.String(); !strings.Contains(s, "environment variable or a file") || strings.Contains(s, "planted-s3cret") {
		t.Fatalf("output %q: want the alternative, never the secret", s)
	}
	fs.String("dsn-file", "", "")
	if err := Parse(fs, []string{"--dsn", "password=x"}); !strings.Contains(fmt.Sprint(err), "(--dsn-file FILE)") {
		t.Fatalf("Parse = %v, want the refusal to name --dsn-file", err)
	}
	if err := Parse(fs, []string{"--dsn", "host=db user=app"}); err != nil {
		t.Fatalf("no secret: %v", err)
	}
}

func TestCheckPasswordFlag(t *testing.T) {
	for _, c := range []struct {
		name, value string
		refused     bool
	}{
		{"password", "hunter2", true},
		{"kafka-sasl-password", "hunter2", true},
		{"password", "", false},
		{"password-file", "/run/secrets/pw", false},
		{"username", "hunter2", false},
	} {
		if err := Check(c.name, c.value); errors.Is(err, ErrSecret) != c.refused {
			t.Errorf("Check(%q, %q) = %v, refused want %v", c.name, c.value, err, c.refused)
		}
	}
}
