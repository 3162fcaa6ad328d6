package pprofexporter

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/pprof/profile"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumererror"
	"go.opentelemetry.io/collector/exporter/exportertest"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/profsym/profsym/pkg/otlpprofiles/otlptest"
)

func TestConfigValidate(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want []string
	}{
		{Config{Directory: "out"}, nil},
		{Config{}, []string{"directory: required"}},
		{Config{KeepFiles: -1}, []string{"directory: required", "keep_files -1"}},
	} {
		err := c.cfg.Validate()
		if len(c.want) == 0 {
			if err != nil {
				t.Errorf("%+v: %v", c.cfg, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%+v: accepted, want %v", c.cfg, c.want)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%+v: %v, want it to say %q", c.cfg, err, w)
			}
		}
	}
}

// realistic is a request of several profiles with the shape of a real one, from the shared
// generator of valid requests.
func realistic() pprofile.Profiles { return otlptest.Realistic(50, 3) }

func TestWritesPprofFilesWithRetention(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pprof")
	f := NewFactory()
	cfg := f.CreateDefaultConfig().(*Config)
	cfg.Directory, cfg.KeepFiles = dir, 2
	exp, err := f.CreateProfiles(t.Context(), exportertest.NewNopSettings(Type), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := exp.Start(t.Context(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := exp.Shutdown(t.Context()); err != nil {
			t.Error(err)
		}
	}()
	pd := realistic()
	want := 0
	for i := range pd.ResourceProfiles().Len() {
		sps := pd.ResourceProfiles().At(i).ScopeProfiles()
		for j := range sps.Len() {
			want += sps.At(j).Profiles().Len()
		}
	}
	if want == 0 {
		t.Fatal("the generated request holds no profile")
	}
	for range 3 {
		if err := exp.ConsumeProfiles(t.Context(), pd); err != nil {
			t.Fatal(err)
		}
	}
	files, err := filepath.Glob(filepath.Join(dir, "profile-*.pb.gz"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 {
		t.Fatalf("%d files kept, want keep_files = 2", len(files))
	}
	for _, name := range files {
		fh, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		p, err := profile.Parse(fh)
		fh.Close()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(p.Sample) == 0 {
			t.Fatalf("%s: no samples", name)
		}
	}
}

func TestStartFailsOnUnusableDirectory(t *testing.T) {
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	f := NewFactory()
	cfg := f.CreateDefaultConfig().(*Config)
	cfg.Directory = filepath.Join(file, "pprof")
	exp, err := f.CreateProfiles(t.Context(), exportertest.NewNopSettings(Type), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := exp.Start(t.Context(), componenttest.NewNopHost()); err == nil {
		t.Fatal("started with a directory below a regular file")
	}
}

// A directory that goes away under a running exporter is a failure the sender hears about (and
// may retry: the directory may come back), not a permanent rejection of the data.
func TestWriteFailureIsRetryable(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pprof")
	f := NewFactory()
	cfg := f.CreateDefaultConfig().(*Config)
	cfg.Directory = dir
	exp, err := f.CreateProfiles(t.Context(), exportertest.NewNopSettings(Type), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := exp.Start(t.Context(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := exp.Shutdown(t.Context()); err != nil {
			t.Error(err)
		}
	}()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	err = exp.ConsumeProfiles(t.Context(), realistic())
	if err == nil {
		t.Fatal("a write into a removed directory succeeded")
	}
	if consumererror.IsPermanent(err) {
		t.Fatalf("%v: permanent, want retryable", err)
	}
}
