// Copyright 2015 The Go Authors. All rights reserved.
// Use of this source code is governed by a BSD-style
// license that can be found in the LICENSE file.

package itanium

import (
	"fmt"
	"testing"
)

func TestASTToString(t *testing.T) {
	var tests = []struct {
		input     AST
		want      string
		formatted string
	}{
		{
			&Qualified{Scope: &Name{Name: "s"}, Name: &Name{Name: "C"}},
			"s::C",
			`Qualified:
  Scope: s
  Name: C`,
		},
		{
			&Typed{Name: &Name{Name: "v"}, Type: &BuiltinType{"int"}},
			"int v",
			`Typed:
  Name: v
  Type: BuiltinType: int`,
		},
	}

	for i, test := range tests {
		if got := ASTToString(test.input); got != test.want {
			t.Errorf("ASTToString of test %d == %s, want %s", i, test.input, test.want)
		}
		if got := fmt.Sprintf("%#v", test.input); got != test.formatted {
			t.Errorf("Formatted test %d == %s, want %s", i, got, test.formatted)
		}
	}
}

// A copy of a VendorQualifier must carry the copied type, not the original one.
func TestVendorQualifierCopyKeepsType(t *testing.T) {
	vq := &VendorQualifier{Qualifier: &Name{Name: "q"}, Type: &Name{Name: "old"}}
	got := vq.Copy(func(a AST) AST {
		if n, ok := a.(*Name); ok && n.Name == "old" {
			return &Name{Name: "new"}
		}
		return nil
	}, func(AST) bool { return false })
	cp, ok := got.(*VendorQualifier)
	if !ok {
		t.Fatalf("Copy = %T, want *VendorQualifier", got)
	}
	if n, ok := cp.Type.(*Name); !ok || n.Name != "new" {
		t.Errorf("copied Type = %#v, want Name new", cp.Type)
	}
}
