package exporter_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/profsym/profsym/services/gateway/internal/exporter"
)

func oneSampleProfiles() pprofile.Profiles {
	pd := pprofile.NewProfiles()
	pd.Dictionary().StringTable().Append("")
	pd.ResourceProfiles().AppendEmpty().ScopeProfiles().AppendEmpty().Profiles().AppendEmpty().Samples().AppendEmpty().Values().Append(1)
	return pd
}

// With KeepFiles the output directories hold the newest files only: a development gateway
// writes into a size-limited volume that would otherwise fill and get the pod evicted. Files
// that are not the exporter's own are left alone.
func TestOutputRetentionKeepsTheNewest(t *testing.T) {
	dir := t.TempDir()
	foreign := filepath.Join(dir, "README")
	if err := os.WriteFile(foreign, []byte("not an output file"), 0o644); err != nil {
		t.Fatal(err)
	}
	fe, err := exporter.NewFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	pe, err := exporter.NewPprof(dir)
	if err != nil {
		t.Fatal(err)
	}
	fe.KeepFiles(3)
	pe.KeepFiles(2)
	var written []string
	for range 7 {
		before, _ := filepath.Glob(filepath.Join(dir, "profiles-*"))
		if err := fe.Export(t.Context(), oneSampleProfiles()); err != nil {
			t.Fatal(err)
		}
		if err := pe.Export(t.Context(), oneSampleProfiles()); err != nil {
			t.Fatal(err)
		}
		after, _ := filepath.Glob(filepath.Join(dir, "profiles-*"))
		for _, f := range after {
			if !slices.Contains(before, f) {
				written = append(written, f)
			}
		}
	}
	otlp, _ := filepath.Glob(filepath.Join(dir, "profiles-*.otlp.pb"))
	if want := written[len(written)-3:]; !slices.Equal(otlp, want) {
		t.Errorf("OTLP files kept: %v, want the newest three %v", otlp, want)
	}
	if pprofs, _ := filepath.Glob(filepath.Join(dir, "profile-*.pb.gz")); len(pprofs) != 2 {
		t.Errorf("pprof files kept: %d (%v), want 2", len(pprofs), pprofs)
	}
	if _, err := os.Stat(foreign); err != nil {
		t.Errorf("a file that is not output was touched: %v", err)
	}
}
