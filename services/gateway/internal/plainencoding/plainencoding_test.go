package plainencoding

import (
	"testing"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/extension/extensiontest"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/profsym/profsym/pkg/otlpprofiles"
	"github.com/profsym/profsym/pkg/otlpprofiles/otlptest"
)

// The encoding's output decodes to the same request, with no orphan string, where pdata's own
// marshaler leaves the resource attributes' strings behind.
func TestMarshalsWithoutOrphans(t *testing.T) {
	f := NewFactory()
	ext, err := f.Create(t.Context(), extensiontest.NewNopSettings(Type), f.CreateDefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := ext.Start(t.Context(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	m, ok := ext.(pprofile.Marshaler)
	if !ok {
		t.Fatalf("%T is not a pprofile.Marshaler: the file exporter would not use it", ext)
	}
	pd := otlptest.Realistic(50, 3)
	pd.ResourceProfiles().At(0).Resource().Attributes().PutStr("process.executable.path", "/usr/bin/not-in-the-table")
	otlpprofiles.Compact(pd)
	if err := otlpprofiles.Orphans(pd); err != nil {
		t.Fatalf("input: %v", err)
	}
	in := otlptest.Resolve(pd)

	// pdata's marshaler rewrites a mutable request in place: give it a copy.
	cp := pprofile.NewProfiles()
	pd.CopyTo(cp)
	viaPdata, err := (&pprofile.ProtoMarshaler{}).MarshalProfiles(cp)
	if err != nil {
		t.Fatal(err)
	}
	back, err := (&pprofile.ProtoUnmarshaler{}).UnmarshalProfiles(viaPdata)
	if err != nil {
		t.Fatal(err)
	}
	if otlpprofiles.Orphans(back) == nil {
		t.Fatal("pdata's marshaler left no orphan: the reason for this encoding is gone")
	}

	b, err := m.MarshalProfiles(pd)
	if err != nil {
		t.Fatal(err)
	}
	out, err := (&pprofile.ProtoUnmarshaler{}).UnmarshalProfiles(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := otlpprofiles.Orphans(out); err != nil {
		t.Fatalf("otlp_plain output: %v", err)
	}
	if err := otlptest.Compare(in, otlptest.Resolve(out)); err != nil {
		t.Fatal(err)
	}
	if err := ext.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
}
