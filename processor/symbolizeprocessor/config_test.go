package symbolizeprocessor

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/confmaptest"
)

func TestConfigStruct(t *testing.T) {
	if err := componenttest.CheckConfigStruct(createDefaultConfig()); err != nil {
		t.Fatal(err)
	}
}

func TestLoadConfig(t *testing.T) {
	cm, err := confmaptest.LoadConf(filepath.Join("testdata", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		id    component.ID
		check func(t *testing.T, c *Config)
	}{
		{component.NewID(Type), func(t *testing.T, c *Config) {
			def := createDefaultConfig()
			if c.Endpoint != "http://127.0.0.1:7070" || c.Deadline != def.Deadline || c.Timeout != def.Timeout ||
				c.CacheEntries != def.CacheEntries || strings.Join(c.FrameTypes, ",") != "native,go,kernel,none" {
				t.Fatalf("defaults not kept: %+v", c)
			}
		}},
		{component.NewIDWithName(Type, "full"), func(t *testing.T, c *Config) {
			if c.Endpoint != "https://symbolizer.example.com" || c.TLS.CAFile != "testdata/ca.pem" || c.BearerToken != "s3cret" ||
				c.Timeout != time.Second || c.Deadline != 3*time.Second || c.BatchAddresses != 4096 || c.Concurrency != 8 ||
				c.CacheEntries != 1000 || strings.Join(c.FrameTypes, ",") != "native,kernel" {
				t.Fatalf("config not read: %+v", c)
			}
		}},
		{component.NewIDWithName(Type, "affinity"), func(t *testing.T, c *Config) {
			a := c.Affinity
			if !a.Enabled || a.DNS != "symbolizer-headless.profsym.svc:7070" || a.AttemptTimeout != 500*time.Millisecond ||
				a.BalanceFactor != 1.5 || a.RefreshInterval != 10*time.Second || a.EjectFor != 10*time.Second || a.GiveUpAfter != 30*time.Second {
				t.Fatalf("affinity not read, or its defaults lost: %+v", a)
			}
		}},
	} {
		t.Run(tc.id.String(), func(t *testing.T) {
			sub, err := cm.Sub(tc.id.String())
			if err != nil {
				t.Fatal(err)
			}
			cfg := NewFactory().CreateDefaultConfig()
			if err := sub.Unmarshal(cfg); err != nil {
				t.Fatal(err)
			}
			if err := confmap.Validate(cfg); err != nil {
				t.Fatal(err)
			}
			tc.check(t, cfg.(*Config))
		})
	}
}

func TestConfigValidate(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	for _, tc := range []struct {
		name string
		edit func(c *Config)
		// want lists substrings the error must hold; none means valid.
		want []string
	}{
		{name: "minimal", edit: func(c *Config) {}},
		{name: "https with tls", edit: func(c *Config) {
			c.Endpoint = "https://symbolizer:7070"
			c.TLS.InsecureSkipVerify = true
		}},
		{name: "kernel frames", edit: func(c *Config) { c.FrameTypes = []string{FrameTypeKernel} }},
		{name: "cache off", edit: func(c *Config) { c.CacheEntries = 0 }},
		{name: "no endpoint", edit: func(c *Config) { c.Endpoint = "" }, want: []string{"endpoint: required"}},
		{name: "not a URL", edit: func(c *Config) { c.Endpoint = "symbolizer:7070" }, want: []string{"want http://host:port"}},
		{name: "grpc scheme", edit: func(c *Config) { c.Endpoint = "grpc://symbolizer:7070" }, want: []string{"want http://host:port"}},
		{name: "tls on http", edit: func(c *Config) { c.TLS.CAFile = "ca.pem" }, want: []string{"tls settings need an https:// endpoint"}},
		{name: "two tokens", edit: func(c *Config) { c.BearerToken = "a"; c.BearerTokenFile = tokenFile },
			want: []string{"set one, not both"}},
		{name: "missing token file", edit: func(c *Config) { c.BearerTokenFile = filepath.Join(t.TempDir(), "absent") },
			want: []string{"bearer_token_file"}},
		{name: "timeouts", edit: func(c *Config) { c.Timeout = 0; c.Deadline = -time.Second },
			want: []string{"timeout 0s: must be positive", "deadline -1s: must be positive"}},
		{name: "limits", edit: func(c *Config) { c.BatchAddresses = 100_001; c.Concurrency = 0; c.CacheEntries = -1 },
			want: []string{"batch_addresses 100001", "concurrency 0", "cache_entries -1"}},
		{name: "frame types", edit: func(c *Config) { c.FrameTypes = []string{"native", "python"} },
			want: []string{`unknown "python"`}},
		{name: "no frame types", edit: func(c *Config) { c.FrameTypes = nil }, want: []string{"frame_types: list at least one"}},
		{name: "affinity by dns", edit: func(c *Config) { c.Affinity.Enabled = true; c.Affinity.DNS = "symbolizer-headless:7070" }},
		{name: "affinity by list", edit: func(c *Config) {
			c.Affinity.Enabled = true
			c.Affinity.Endpoints = []string{"10.0.0.1:7070", "10.0.0.2:7070"}
		}},
		{name: "affinity off ignores its settings", edit: func(c *Config) { c.Affinity.BalanceFactor = 0.5 }},
		{name: "affinity without replicas", edit: func(c *Config) { c.Affinity.Enabled = true },
			want: []string{"affinity: set dns"}},
		{name: "affinity both", edit: func(c *Config) {
			c.Affinity.Enabled = true
			c.Affinity.DNS = "a:1"
			c.Affinity.Endpoints = []string{"b:1"}
		}, want: []string{"not both"}},
		{name: "affinity bad values", edit: func(c *Config) {
			c.Affinity = AffinityConfig{Enabled: true, DNS: "no-port", Endpoints: nil, AttemptTimeout: time.Hour, BalanceFactor: 1}
		}, want: []string{"affinity.dns \"no-port\"", "affinity.refresh_interval 0s", "affinity.attempt_timeout 1h0m0s", "affinity.balance_factor 1", "affinity.eject_for 0s", "affinity.give_up_after 0s"}},
		// Every problem is reported at once, not only the first.
		{name: "all at once", edit: func(c *Config) { c.Endpoint = ""; c.Timeout = 0; c.FrameTypes = []string{"jvm"} },
			want: []string{"endpoint: required", "timeout 0s", `unknown "jvm"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := createDefaultConfig()
			c.Endpoint = "http://127.0.0.1:7070"
			tc.edit(c)
			err := c.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("valid config refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("invalid config accepted, want errors %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}
