package yamlconfig

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var errSentinel = errors.New("pkg: invalid configuration")

func TestProblemsErr(t *testing.T) {
	var empty Problems
	if err := empty.Err(errSentinel); err != nil {
		t.Fatalf("no problems: %v", err)
	}

	p := Problems{Prefix: "stacksaga.x."}
	cause := errors.New("bad duration")
	p.Add("b%d", "must be positive, got %v", -time.Second)
	p.Add("a", "%w", cause)
	p.Append(nil, errors.New("stacksaga.x.c: preformatted"), nil)
	err := p.Err(errSentinel)
	want := "pkg: invalid configuration\n" +
		"stacksaga.x.a: bad duration\n" +
		"stacksaga.x.b%d: must be positive, got -1s\n" +
		"stacksaga.x.c: preformatted"
	if err == nil || err.Error() != want {
		t.Fatalf("Err() =\n%v\nwant\n%s", err, want)
	}
	if !errors.Is(err, errSentinel) || !errors.Is(err, cause) {
		t.Fatalf("Err() does not wrap the sentinel and the cause: %v", err)
	}
	// Err sorts a copy: a problem added later is sorted into the next report.
	p.Add("0", "first")
	if got := p.Err(errSentinel).Error(); !strings.HasPrefix(got, "pkg: invalid configuration\nstacksaga.x.0: first\n") {
		t.Fatalf("after another Add: %s", got)
	}
}

func TestEnv(t *testing.T) {
	vars := map[string]string{"SET": "  v ", "BLANK": "  ", "EMPTY": ""}
	get := Env(func(k string) (string, bool) { v, ok := vars[k]; return v, ok })
	if v, ok := get("SET"); !ok || v != "v" {
		t.Fatalf("SET = %q, %v", v, ok)
	}
	for _, name := range []string{"BLANK", "EMPTY", "UNSET"} {
		if v, ok := get(name); ok {
			t.Fatalf("%s reported as set (%q)", name, v)
		}
	}
	cause := errors.New("parse")
	err := EnvError("STACKSAGA_X_A", "stacksaga.x.a", cause)
	if err.Error() != "STACKSAGA_X_A (stacksaga.x.a): parse" || !errors.Is(err, cause) {
		t.Fatalf("EnvError = %v", err)
	}
}

type doc struct {
	Stacksaga struct {
		Instance struct {
			Name string `yaml:"region"`
		} `yaml:"instance"`
	} `yaml:"stacksaga"`
}

func TestDecode(t *testing.T) {
	var d doc
	d.Stacksaga.Instance.Name = "kept"
	if err := Decode([]byte(" \n\t"), &d); err != nil || d.Stacksaga.Instance.Name != "kept" {
		t.Fatalf("blank document: %v, %+v", err, d)
	}
	if err := Decode([]byte("stacksaga:\n  instance: {region: n}\nother: 1\n"), &d); err != nil || d.Stacksaga.Instance.Name != "n" {
		t.Fatalf("document: %v, %+v", err, d)
	}
	if err := Decode([]byte("stacksaga: [1, 2"), &d); err == nil {
		t.Fatal("malformed document decoded")
	}
}

func TestLoadFile(t *testing.T) {
	load := func(data []byte) (string, error) {
		if string(data) == "bad" {
			return "", errSentinel
		}
		return string(data), nil
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(path, []byte("ok"), 0o600); err != nil {
		t.Fatal(err)
	}
	if v, err := LoadFile("pkg", path, load); err != nil || v != "ok" {
		t.Fatalf("LoadFile = %q, %v", v, err)
	}
	if err := os.WriteFile(path, []byte("bad"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadFile("pkg", path, load); !errors.Is(err, errSentinel) || err.Error() != path+": "+errSentinel.Error() {
		t.Fatalf("load error: %v", err)
	}
	_, err := LoadFile("pkg", filepath.Join(dir, "missing.yaml"), load)
	if !errors.Is(err, fs.ErrNotExist) || !strings.HasPrefix(err.Error(), "pkg: read configuration: ") {
		t.Fatalf("missing file: %v", err)
	}
}
