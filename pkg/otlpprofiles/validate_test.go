package otlpprofiles_test

import (
	"math/rand/v2"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/profsym/profsym/pkg/otlpprofiles"
	"github.com/profsym/profsym/pkg/otlpprofiles/otlptest"
)

func base() pprofile.Profiles {
	return otlptest.Generate(rand.New(rand.NewPCG(7, 7)))
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		break_ func(pd pprofile.Profiles)
		want   string // substring of the error; empty: valid
	}{
		{"generated", func(pprofile.Profiles) {}, ""},
		{"empty request", func(pd pprofile.Profiles) { pprofile.NewProfiles().CopyTo(pd) }, ""},
		{"zero index on empty tables", func(pd pprofile.Profiles) {
			n := pprofile.NewProfiles()
			p := n.ResourceProfiles().AppendEmpty().ScopeProfiles().AppendEmpty().Profiles().AppendEmpty()
			p.Samples().AppendEmpty()
			n.CopyTo(pd)
		}, ""},
		{"location mapping", func(pd pprofile.Profiles) { pd.Dictionary().LocationTable().At(1).SetMappingIndex(99) },
			"dictionary.location_table[1].mapping_index: 99 outside mapping_table"},
		{"negative mapping", func(pd pprofile.Profiles) { pd.Dictionary().LocationTable().At(1).SetMappingIndex(-1) },
			"dictionary.location_table[1].mapping_index: -1"},
		{"line function", func(pd pprofile.Profiles) {
			pd.Dictionary().LocationTable().At(1).Lines().AppendEmpty().SetFunctionIndex(1000)
		}, "dictionary.location_table[1].lines["},
		{"location attribute", func(pd pprofile.Profiles) { pd.Dictionary().LocationTable().At(1).AttributeIndices().Append(5000) },
			"attribute_indices["},
		{"mapping filename", func(pd pprofile.Profiles) { pd.Dictionary().MappingTable().At(1).SetFilenameStrindex(1 << 30) },
			"dictionary.mapping_table[1].filename_strindex"},
		{"function name", func(pd pprofile.Profiles) {
			pd.Dictionary().FunctionTable().AppendEmpty().SetSystemNameStrindex(-3)
		}, "system_name_strindex: -3"},
		{"attribute key", func(pd pprofile.Profiles) { pd.Dictionary().AttributeTable().At(1).SetKeyStrindex(77777) },
			"dictionary.attribute_table[1].key_strindex"},
		{"attribute unit", func(pd pprofile.Profiles) { pd.Dictionary().AttributeTable().At(1).SetUnitStrindex(77777) },
			"dictionary.attribute_table[1].unit_strindex"},
		{"stack location", func(pd pprofile.Profiles) { pd.Dictionary().StackTable().At(1).LocationIndices().Append(4242) },
			"dictionary.stack_table[1].location_indices["},
		{"sample stack", func(pd pprofile.Profiles) {
			pd.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0).Samples().AppendEmpty().SetStackIndex(999)
		}, "stack_index: 999 outside stack_table"},
		{"sample link", func(pd pprofile.Profiles) {
			pd.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0).Samples().AppendEmpty().SetLinkIndex(5)
		}, "link_index: 5 outside link_table"},
		{"sample attribute", func(pd pprofile.Profiles) {
			pd.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0).Samples().AppendEmpty().AttributeIndices().Append(-1)
		}, "attribute_indices[0]: -1"},
		{"sample type", func(pd pprofile.Profiles) {
			pd.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0).SampleType().SetTypeStrindex(123456)
		}, "resource_profiles[0].scope_profiles[0].profiles[0].sample_type.type_strindex"},
		{"period type", func(pd pprofile.Profiles) {
			pd.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0).PeriodType().SetUnitStrindex(123456)
		}, "period_type.unit_strindex"},
		{"profile attribute", func(pd pprofile.Profiles) {
			pd.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0).AttributeIndices().Append(9999)
		}, "profiles[0].attribute_indices[0]: 9999"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pd := base()
			tc.break_(pd)
			err := otlpprofiles.Validate(pd)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("valid request rejected: %v", err)
			case tc.want != "" && err == nil:
				t.Fatalf("accepted; want error containing %q", tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Fatalf("error %q; want it to contain %q", err, tc.want)
			}
		})
	}
}

// ValidateStrict refuses what Validate lets through from other producers and the node
// collector never writes, and passes what Validate refuses too.
func TestValidateStrict(t *testing.T) {
	if err := otlpprofiles.ValidateStrict(strictBase()); err != nil {
		t.Fatalf("valid request rejected: %v", err)
	}
	tests := []struct {
		name   string
		break_ func(pd pprofile.Profiles)
		want   string
	}{
		{"empty tables", func(pd pprofile.Profiles) { pprofile.NewProfiles().CopyTo(pd) }, "dictionary.string_table is empty"},
		{"string 0", func(pd pprofile.Profiles) { pd.Dictionary().StringTable().SetAt(0, "x") }, "string_table[0] is not empty"},
		{"location 0", func(pd pprofile.Profiles) { pd.Dictionary().LocationTable().At(0).SetAddress(5) }, "location_table[0] is not the zero location"},
		{"range, as Validate", func(pd pprofile.Profiles) { pd.Dictionary().LocationTable().At(1).SetMappingIndex(99) },
			"dictionary.location_table[1].mapping_index: 99 outside mapping_table"},
		{"mapping limit", func(pd pprofile.Profiles) {
			pd.Dictionary().MappingTable().At(1).SetMemoryLimit(0xfff)
		}, "dictionary.mapping_table[1]: memory_limit"},
		{"address outside mapping", func(pd pprofile.Profiles) {
			pd.Dictionary().LocationTable().At(1).SetAddress(0x2000)
		}, "dictionary.location_table[1]: address 0x2000 outside its mapping [0x1000, 0x2000)"},
		{"timestamp outside", func(pd pprofile.Profiles) {
			pd.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0).Samples().At(0).TimestampsUnixNano().SetAt(0, 1)
		}, "profiles[0].samples[0]: timestamp 1 outside [1000, 2000)"},
		{"values for timestamps", func(pd pprofile.Profiles) {
			pd.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0).Samples().At(0).Values().Append(2)
		}, "samples[0]: 2 values for 1 timestamps"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pd := strictBase()
			tc.break_(pd)
			err := otlpprofiles.ValidateStrict(pd)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v; want it to contain %q", err, tc.want)
			}
		})
	}
}

// strictBase is a request as the node collector writes one: every table seeded with its zero
// value, a location inside its mapping, a sample with a value per timestamp inside the
// profile's time range.
func strictBase() pprofile.Profiles {
	pd := pprofile.NewProfiles()
	d := pd.Dictionary()
	d.StringTable().Append("", "a.out", "cpu", "nanoseconds")
	d.MappingTable().AppendEmpty()
	m := d.MappingTable().AppendEmpty()
	m.SetMemoryStart(0x1000)
	m.SetMemoryLimit(0x2000)
	m.SetFilenameStrindex(1)
	d.LocationTable().AppendEmpty()
	l := d.LocationTable().AppendEmpty()
	l.SetMappingIndex(1)
	l.SetAddress(0x1100)
	d.FunctionTable().AppendEmpty()
	d.LinkTable().AppendEmpty()
	d.AttributeTable().AppendEmpty()
	d.StackTable().AppendEmpty()
	d.StackTable().AppendEmpty().LocationIndices().Append(1)
	p := pd.ResourceProfiles().AppendEmpty().ScopeProfiles().AppendEmpty().Profiles().AppendEmpty()
	p.SampleType().SetTypeStrindex(2)
	p.SampleType().SetUnitStrindex(3)
	p.SetTime(pcommon.Timestamp(1000))
	p.SetDurationNano(1000)
	s := p.Samples().AppendEmpty()
	s.SetStackIndex(1)
	s.TimestampsUnixNano().Append(1500)
	s.Values().Append(1)
	return pd
}
