package unwind

import (
	"reflect"
	"testing"

	"github.com/profsym/profsym/pkg/debuginfo/cfi"
)

func TestEncode(t *testing.T) {
	normal := func(pc uint64, off int32) cfi.Row {
		return cfi.Row{PC: pc, CFA: cfi.CFASP, CFAOffset: off, RA: cfi.RegOffset, RAOffset: -8}
	}
	tests := []struct {
		name string
		in   []cfi.Row
		want encoded
	}{
		{"relative PCs and merging of equal rules", []cfi.Row{normal(0x1000, 8), normal(0x1004, 8), normal(0x1008, 16), {PC: 0x1010}},
			encoded{base: 0x1000, rows: []row{{PC: 0, CFARule: cfaRSP, CFAOffset: 8}, {PC: 8, CFARule: cfaRSP, CFAOffset: 16}, {PC: 0x10}}}},
		{"saved RBP, and RBP too far for the kernel's 16 bits", []cfi.Row{
			{PC: 0x10, CFA: cfi.CFAFP, CFAOffset: 16, RA: cfi.RegOffset, RAOffset: -8, FP: cfi.RegOffset, FPOffset: -16},
			{PC: 0x20, CFA: cfi.CFASP, CFAOffset: 8, RA: cfi.RegOffset, RAOffset: -8, FP: cfi.RegOffset, FPOffset: -70000},
			{PC: 0x30, CFA: cfi.CFASP, CFAOffset: 8, RA: cfi.RegOffset, RAOffset: -8, FP: cfi.RegExpression}},
			encoded{base: 0x10, rows: []row{
				{PC: 0, CFARule: cfaRBP, CFAOffset: 16, FPRule: fpOffset, FPOffset: -16},
				{PC: 0x10, CFARule: cfaRSP, CFAOffset: 8, FPRule: fpUnknown}}}},
		{"return address elsewhere than CFA-8, undefined, or an expression", []cfi.Row{
			{PC: 0, CFA: cfi.CFASP, CFAOffset: 16, RA: cfi.RegOffset, RAOffset: -16},
			{PC: 4, CFA: cfi.CFASP, CFAOffset: 8, RA: cfi.RegUndefined},
			{PC: 8, CFA: cfi.CFAExpression},
			{PC: 12, CFA: cfi.CFAPLT, CFAOffset: 11, RA: cfi.RegOffset, RAOffset: -8},
			{PC: 16, CFA: cfi.CFAEndOfStack}},
			encoded{rows: []row{
				{PC: 0, CFARule: cfaUnsupported}, {PC: 4, CFARule: cfaOutermost}, {PC: 8, CFARule: cfaUnsupported},
				{PC: 12, CFARule: cfaPLT, CFAOffset: 11}, {PC: 16, CFARule: cfaOutermost}}}},
		{"a file spanning more than 4 GiB ends its table there", []cfi.Row{normal(0, 8), normal(1<<33, 16)},
			encoded{rows: []row{{PC: 0, CFARule: cfaRSP, CFAOffset: 8}, {PC: 0xffffffff}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := encode(&cfi.Table{Rows: tt.in})
			if !reflect.DeepEqual(*got, tt.want) {
				t.Errorf("encode =\n%+v\nwant\n%+v", *got, tt.want)
			}
		})
	}
}
