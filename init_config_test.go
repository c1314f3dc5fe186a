package goccl

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/commslog"
)

func ExampleLoadConfig() {
	cfg, err := LoadConfig("testdata/config/deepspeed.json")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(cfg.CommsLogger.Enabled, cfg.CommsLogger.ProfAll, cfg.CommsLogger.ProfOps, cfg.CommsLogger.Style)
	fmt.Println(cfg.Goccl.Algorithm, time.Duration(cfg.Goccl.Timeout), cfg.Goccl.Transport, cfg.Goccl.Streams)
	// Output:
	// true false [all_reduce all_gather] deepspeed
	// ring,tree 10m0s tcp 2
}

// fakeEnv is a getenv over a map.
func fakeEnv(m map[string]string) Option {
	return WithGetenv(func(k string) string { return m[k] })
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "goccl.json")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConfigUnknownKey(t *testing.T) {
	for _, tt := range []struct{ body, key string }{
		{`{"goccl": {"timout": "1s"}}`, `"timout"`},
		{`{"comms_logger": {"enabled": true, "prof_al": true}}`, `"prof_al"`},
		{`{"goccl": {}, "train_batch_size": 8}`, `"train_batch_size"`},
		{`{"gocl": {}}`, `"gocl"`},
	} {
		p := writeConfig(t, tt.body)
		_, err := LoadConfig(p)
		if err == nil || !strings.Contains(err.Error(), tt.key) || !strings.Contains(err.Error(), p) || !errors.Is(err, ErrInvalid) {
			t.Errorf("LoadConfig(%s) = %v; want an ErrInvalid naming %s and the file", tt.body, err, tt.key)
		}
	}
}

func TestConfigBadValues(t *testing.T) {
	for _, body := range []string{
		`{"goccl": {"timeout": "soon"}}`,
		`{"goccl": {"timeout": -3}}`,
		`{"goccl": {"streams": "two"}}`,
		`{"goccl": {}} {}`,
		`{"comms_logger": {"enabled": "yes"}}`,
		`{"goccl": {"comms_log_units": "furlongs"}}`,
		`{"goccl": {"algorithm": "rng"}}`,
		`{"goccl": {"streams": -1}}`,
		`{"goccl": {"debug": "loud"}}`,
		`[1]`,
	} {
		if _, err := LoadConfig(writeConfig(t, body)); !errors.Is(err, ErrInvalid) {
			t.Errorf("LoadConfig(%s) = %v; want ErrInvalid", body, err)
		}
	}
	if _, err := LoadConfig(filepath.Join(t.TempDir(), "none.json")); err == nil || errors.Is(err, ErrInvalid) {
		t.Errorf("LoadConfig(missing file) = %v; want the file's error", err)
	}
}

func TestConfigDurationSeconds(t *testing.T) {
	c, err := LoadConfig(writeConfig(t, `{"goccl": {"timeout": 90, "shrink_wait": "1.5"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if time.Duration(c.Goccl.Timeout) != 90*time.Second || time.Duration(c.Goccl.ShrinkWait) != 1500*time.Millisecond {
		t.Errorf("timeout %v, shrink_wait %v; want 1m30s, 1.5s", time.Duration(c.Goccl.Timeout), time.Duration(c.Goccl.ShrinkWait))
	}
}

// TestConfigPrecedence checks options > environment > file > defaults for
// timeout, algorithm, transport and streams.
func TestConfigPrecedence(t *testing.T) {
	file := &Config{Goccl: GocclConfig{
		Timeout: Duration(3 * time.Minute), Algorithm: "tree", Transport: "mem", Streams: 3,
	}}
	env := map[string]string{EnvTimeout: "2m", algo.EnvAlgo: "halving", "GOCCL_TRANSPORT": "tcp", "GOCCL_STREAMS": "2"}
	opts := []Option{WithTimeout(time.Minute), WithAlgorithm("ring"), WithTransport("mem"), WithStreams(1)}
	type want struct {
		timeout   time.Duration
		algo      string
		transport string
		streams   int
	}
	for _, tt := range []struct {
		name string
		opts []Option
		want want
	}{
		{"defaults", []Option{fakeEnv(nil)}, want{DefaultTimeout, "[]", "", 0}},
		{"file", []Option{fakeEnv(nil), WithConfig(file)}, want{3 * time.Minute, "[tree]", "mem", 3}},
		{"env over file", []Option{fakeEnv(env), WithConfig(file)}, want{2 * time.Minute, "[halving]", "tcp", 2}},
		{"options over env", append([]Option{fakeEnv(env), WithConfig(file)}, opts...), want{time.Minute, "[ring]", "mem", 1}},
	} {
		o, err := buildOptions(tt.opts)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		got := want{o.timeout, fmt.Sprint(o.algos), o.transport, o.streams}
		if got != tt.want {
			t.Errorf("%s: got %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

func TestConfigFromEnvVar(t *testing.T) {
	o, err := buildOptions([]Option{fakeEnv(map[string]string{EnvConfig: "testdata/config/deepspeed.json"})})
	if err != nil {
		t.Fatal(err)
	}
	if o.timeout != 10*time.Minute || o.streams != 2 || o.cfg.Path != "testdata/config/deepspeed.json" {
		t.Errorf("GOCCL_CONFIG: timeout %v streams %d path %q", o.timeout, o.streams, o.cfg.Path)
	}
	if c := o.logCfg; !c.Enabled || len(c.ProfOps) != 2 {
		t.Errorf("comms_logger from the file: %+v", c)
	}
	_, err = buildOptions([]Option{fakeEnv(map[string]string{EnvConfig: writeConfig(t, `{"goccl": {"algo": "ring"}}`)})})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), EnvConfig) || !strings.Contains(err.Error(), `"algo"`) {
		t.Errorf("GOCCL_CONFIG with an unknown key: %v", err)
	}
}

func TestConfigCommsLoggerPrecedence(t *testing.T) {
	file := &Config{CommsLogger: &commslog.Config{Enabled: true, Verbose: true, ProfOps: []string{"all_reduce"}}}
	o, err := buildOptions([]Option{WithConfig(file), fakeEnv(map[string]string{commslog.EnvVerbose: "0"})})
	if err != nil {
		t.Fatal(err)
	}
	if c := o.logCfg; !c.Enabled || c.Verbose || len(c.ProfOps) != 1 {
		t.Errorf("env's verbose=0 over the file's true, the rest from the file: %+v", c)
	}
	o, err = buildOptions([]Option{WithConfig(file), fakeEnv(nil), WithCommsLog(commslog.Config{})})
	if err != nil || o.logCfg.Enabled {
		t.Errorf("WithCommsLog over the file: %+v, %v", o.logCfg, err)
	}
}

func TestConfigMismatchCheckAndSecret(t *testing.T) {
	off := false
	secret := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secret, []byte("s3cret\n"), 0o600)
	file := &Config{Goccl: GocclConfig{MismatchCheck: &off, SecretFile: secret}}
	o, err := buildOptions([]Option{WithConfig(file), fakeEnv(nil)})
	if err != nil || !o.noCheck || o.secretFile != secret {
		t.Fatalf("file: noCheck %v secretFile %q, %v", o.noCheck, o.secretFile, err)
	}
	if b, err := readSecret(o.secretFile); string(b) != "s3cret" {
		t.Errorf("readSecret = %q, %v", b, err)
	}
	o, _ = buildOptions([]Option{WithConfig(file), fakeEnv(map[string]string{"GOCCL_SECRET": "env"}), WithMismatchCheck(true)})
	if o.noCheck || string(o.secret) != "env" || o.secretFile != "" {
		t.Errorf("option and env over file: noCheck %v secret %q secretFile %q", o.noCheck, o.secret, o.secretFile)
	}
}

func TestTimeoutEnv(t *testing.T) {
	for v, want := range map[string]time.Duration{"90s": 90 * time.Second, "2.5": 2500 * time.Millisecond, "1h": time.Hour} {
		o, err := buildOptions([]Option{fakeEnv(map[string]string{EnvTimeout: v})})
		if err != nil || o.timeout != want {
			t.Errorf("GOCCL_TIMEOUT=%s: %v, %v; want %v", v, o.timeout, err, want)
		}
	}
	for _, v := range []string{"soon", "0", "-1s", "1e12"} {
		_, err := buildOptions([]Option{fakeEnv(map[string]string{EnvTimeout: v})})
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), EnvTimeout) {
			t.Errorf("GOCCL_TIMEOUT=%s: %v; want ErrInvalid naming the variable", v, err)
		}
	}
}

func TestInvalidSettings(t *testing.T) {
	for name, opts := range map[string][]Option{
		"GOCCL_ALGO":    {fakeEnv(map[string]string{algo.EnvAlgo: "rng"})},
		"WithAlgorithm": {fakeEnv(nil), WithAlgorithm("rng")},
		"WithTimeout":   {fakeEnv(nil), WithTimeout(0)},
		"GOCCL_STREAMS": {fakeEnv(map[string]string{"GOCCL_STREAMS": "0"})},
		"GOCCL_DEBUG":   {fakeEnv(map[string]string{EnvDebug: "loud"})},
	} {
		if _, err := buildOptions(opts); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v; want ErrInvalid", name, err)
		}
	}
	if _, err := NewLocal(2, fakeEnv(map[string]string{algo.EnvAlgo: "rng"})); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), algo.EnvAlgo) {
		t.Errorf("NewLocal with a bad GOCCL_ALGO: %v; want ErrInvalid naming it", err)
	}
	if err := RunLocal(t.Context(), 0, nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("RunLocal(ctx, 0, ...) = %v; want ErrInvalid", err)
	}
}

func TestConfigRelativePaths(t *testing.T) {
	p := writeConfig(t, `{"goccl": {"secret_file": "secret", "tls_cert": "/etc/c.pem", "tls_key": "k.pem"}}`)
	c, err := LoadConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Dir(p)
	if g := c.Goccl; g.SecretFile != filepath.Join(dir, "secret") || g.TLSCert != "/etc/c.pem" || g.TLSKey != filepath.Join(dir, "k.pem") || g.TLSCA != "" {
		t.Errorf("paths not taken from the file's directory: %+v", g)
	}
}

func TestSpinEnv(t *testing.T) {
	for v, want := range map[string]time.Duration{"": 0, "50us": 50 * time.Microsecond, " 1ms ": time.Millisecond, "0": -1, "0s": -1} {
		o, err := buildOptions([]Option{fakeEnv(map[string]string{EnvSpin: v})})
		if err != nil || o.spin != want {
			t.Errorf("%s=%q: spin %v, %v; want %v", EnvSpin, v, o.spin, err, want)
		}
	}
	for _, v := range []string{"50", "soon", "-1us", "1e3"} {
		_, err := buildOptions([]Option{fakeEnv(map[string]string{EnvSpin: v})})
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), EnvSpin) {
			t.Errorf("%s=%q: %v; want ErrInvalid naming the variable", EnvSpin, v, err)
		}
	}
	if _, err := NewLocal(2, fakeEnv(map[string]string{EnvSpin: "fast"})); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), EnvSpin) {
		t.Errorf("NewLocal with a bad %s: %v; want ErrInvalid naming it", EnvSpin, err)
	}
	// The board polls as the transports do: once where they do not poll.
	for v, want := range map[string]int{"": boardPolls, "0": 1} {
		comms, err := NewLocal(2, fakeEnv(map[string]string{EnvSpin: v}))
		if err != nil {
			t.Fatal(err)
		}
		if b := comms[0].board; b == nil || b.polls != want {
			t.Errorf("%s=%q: the board (%v) does not read a slot %d times before it waits", EnvSpin, v, b != nil, want)
		}
		for _, c := range comms {
			c.Close()
		}
	}
}
