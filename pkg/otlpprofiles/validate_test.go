package otlpprofiles_test

import (
	"math/rand/v2"
	"strings"
	"testing"

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
