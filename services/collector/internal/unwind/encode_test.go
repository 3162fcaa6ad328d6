package unwind

import (
	"debug/elf"
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
			encoded{base: 0x1000, rows: []row{{PC: 0, CFARule: cfaSP, CFAOffset: 8, RAOffset: -8}, {PC: 8, CFARule: cfaSP, CFAOffset: 16, RAOffset: -8}, {PC: 0x10}}}},
		{"saved RBP, and RBP too far for the kernel's 16 bits", []cfi.Row{
			{PC: 0x10, CFA: cfi.CFAFP, CFAOffset: 16, RA: cfi.RegOffset, RAOffset: -8, FP: cfi.RegOffset, FPOffset: -16},
			{PC: 0x20, CFA: cfi.CFASP, CFAOffset: 8, RA: cfi.RegOffset, RAOffset: -8, FP: cfi.RegOffset, FPOffset: -70000},
			{PC: 0x30, CFA: cfi.CFASP, CFAOffset: 8, RA: cfi.RegOffset, RAOffset: -8, FP: cfi.RegExpression}},
			encoded{base: 0x10, rows: []row{
				{PC: 0, CFARule: cfaFP, CFAOffset: 16, FPRule: fpOffset, FPOffset: -16, RAOffset: -8},
				{PC: 0x10, CFARule: cfaSP, CFAOffset: 8, FPRule: fpUnknown, RAOffset: -8}}}},
		{"return address elsewhere than CFA-8, too far, undefined, in a register, or an expression", []cfi.Row{
			{PC: 0, CFA: cfi.CFASP, CFAOffset: 16, RA: cfi.RegOffset, RAOffset: -16},
			{PC: 2, CFA: cfi.CFASP, CFAOffset: 16, RA: cfi.RegOffset, RAOffset: -40000},
			{PC: 4, CFA: cfi.CFASP, CFAOffset: 8, RA: cfi.RegUndefined},
			{PC: 6, CFA: cfi.CFASP, CFAOffset: 8, RA: cfi.RegSame},
			{PC: 8, CFA: cfi.CFAExpression},
			{PC: 12, CFA: cfi.CFAPLT, CFAOffset: 11, RA: cfi.RegOffset, RAOffset: -8},
			{PC: 16, CFA: cfi.CFAEndOfStack},
			{PC: 20, CFA: cfi.CFASignalFrame}},
			encoded{rows: []row{
				{PC: 0, CFARule: cfaSP, CFAOffset: 16, RAOffset: -16}, {PC: 2, CFARule: cfaUnsupported},
				{PC: 4, CFARule: cfaOutermost}, {PC: 6, CFARule: cfaUnsupported},
				{PC: 12, CFARule: cfaPLT, CFAOffset: 11, RAOffset: -8}, {PC: 16, CFARule: cfaOutermost},
				{PC: 20, CFARule: cfaSignal}}}},
		{"a file spanning more than 4 GiB ends its table there", []cfi.Row{normal(0, 8), normal(1<<33, 16)},
			encoded{rows: []row{{PC: 0, CFARule: cfaSP, CFAOffset: 8, RAOffset: -8}, {PC: 0xffffffff}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := encode(&cfi.Table{Arch: elf.EM_X86_64, Rows: tt.in})
			if !reflect.DeepEqual(*got, tt.want) {
				t.Errorf("encode =\n%+v\nwant\n%+v", *got, tt.want)
			}
		})
	}
}

func TestEncodeAArch64(t *testing.T) {
	in := []cfi.Row{
		// A leaf: CFA = SP, the return address still in x30.
		{PC: 0x400, CFA: cfi.CFASP},
		// After stp x29, x30, [sp, #-32]!: both saved at the bottom of the frame.
		{PC: 0x404, CFA: cfi.CFASP, CFAOffset: 32, FP: cfi.RegOffset, FPOffset: -32, RA: cfi.RegOffset, RAOffset: -24, RASigned: true},
		// After mov x29, sp.
		{PC: 0x408, CFA: cfi.CFAFP, CFAOffset: 32, FP: cfi.RegOffset, FPOffset: -32, RA: cfi.RegOffset, RAOffset: -24, RASigned: true},
		// The vDSO's sigreturn trampoline.
		{PC: 0x500, CFA: cfi.CFASignalFrame},
		{PC: 0x508},
	}
	want := encoded{base: 0x400, rows: []row{
		{PC: 0, CFARule: cfaSP, RARule: raLink},
		{PC: 4, CFARule: cfaSP, CFAOffset: 32, FPRule: fpOffset, FPOffset: -32, RAOffset: -24},
		{PC: 8, CFARule: cfaFP, CFAOffset: 32, FPRule: fpOffset, FPOffset: -32, RAOffset: -24},
		{PC: 0x100, CFARule: cfaSignal},
		{PC: 0x108},
	}}
	got := encode(&cfi.Table{Arch: elf.EM_AARCH64, Rows: in})
	if !reflect.DeepEqual(*got, want) {
		t.Errorf("encode =\n%+v\nwant\n%+v", *got, want)
	}
}
