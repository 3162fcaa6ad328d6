package llvmcompare

import (
	"regexp"
	"strings"
)

// Known lists the classifiers for differences whose cause is understood and where the
// reference, not the engine, is the odd one out. Each reason says which side is right.
var Known = []Classifier{CloneSuffix, LambdaTemplateParam, Undemangled, RustLegacySpelling}

// Reasons of the known differences, as Diff.Reason carries them.
const (
	ReasonCloneSuffix = "gcc clone part: llvm-symbolizer names the outermost frame after its ELF symbol (foo.cold, foo.isra.0, " +
		"foo.constprop.0); DWARF names the source function, which addr2line and ours print"
	ReasonLambdaTemplateParam = "LLVM 14 demangler bug: template-parameter references (T_) in the parameter list of a " +
		"template instantiated with a lambda resolve in the lambda's scope; GNU c++filt agrees with ours"
	ReasonRustLegacy = "Rust legacy symbol: llvm-symbolizer 14 demangles it as Itanium C++ (keeps ::h<hash> and $-escapes); " +
		"ours is rustc-demangle's spelling of the same path"
)

// cloneSuffix matches gcc's clone suffixes as symbol names carry them: raw in C symbols
// ("vec_push.cold", "f.constprop.0.isra.0") and in parentheses once demangled
// ("f(int) (.constprop.0.cold)").
var cloneSuffix = regexp.MustCompile(`(?:\s\((?:\.(?:cold|isra|constprop|part|lto_priv|localalias|str)(?:\.\d+)?)+\)|(?:\.(?:cold|isra|constprop|part|lto_priv|localalias)(?:\.\d+)?)+)$`)

// CloneSuffix accepts chains that are equal but for a gcc clone suffix on llvm-symbolizer's
// outermost frame, which it takes from the symbol table rather than DWARF.
func CloneSuffix(d Diff) (string, bool) {
	if d.Kind != KindChain || len(d.Ours) != len(d.Ref) || len(d.Ours) == 0 {
		return "", false
	}
	last := len(d.Ours) - 1
	for i := 0; i < last; i++ {
		if d.Ours[i].Function != d.Ref[i].Function {
			return "", false
		}
	}
	r := d.Ref[last].Function
	stripped := cloneSuffix.ReplaceAllString(r, "")
	if stripped == r || stripped != d.Ours[last].Function {
		return "", false
	}
	return ReasonCloneSuffix, true
}

// LambdaTemplateParam accepts a frame whose names agree except in the function's parameter
// list, when the function is a template instantiated with a lambda (the mangled name holds a
// closure type, "Ul"): LLVM 14's Itanium demangler resolves T_ there in the wrong scope,
// printing e.g. transform<It, Out, conv<int>::'lambda'(int)>(int, int, ...) where GNU c++filt
// and ours print (It, It, Out, ...).
func LambdaTemplateParam(d Diff) (string, bool) {
	if d.Kind != KindChain || len(d.Ours) != len(d.Ref) {
		return "", false
	}
	found := false
	for i := range d.Ours {
		o, r := d.Ours[i], d.Ref[i]
		if o.Function == r.Function {
			continue
		}
		if !strings.Contains(o.LinkageName, "Ul") {
			return "", false
		}
		po, okO := withoutParams(o.Function)
		pr, okR := withoutParams(r.Function)
		if !okO || !okR || po != pr {
			return "", false
		}
		found = true
	}
	return ReasonLambdaTemplateParam, found
}

// withoutParams cuts the outermost trailing parameter list (and a trailing " const") off a
// demangled function name.
func withoutParams(name string) (string, bool) {
	s := strings.TrimSuffix(name, " const")
	if !strings.HasSuffix(s, ")") {
		return "", false
	}
	depth := 0
	for i := len(s) - 1; i >= 0; i-- {
		switch s[i] {
		case ')':
			depth++
		case '(':
			depth--
			if depth == 0 {
				return s[:i], true
			}
		}
	}
	return "", false
}

var (
	rustHash    = regexp.MustCompile(`::h[0-9a-f]{16}$`)
	rustEscapes = strings.NewReplacer("$LT$", "<", "$GT$", ">", "$RF$", "&", "$BP$", "*", "$LP$", "(", "$RP$", ")",
		"$C$", ",", "$u20$", " ", "$u27$", "'", "$u5b$", "[", "$u5d$", "]", "$u7b$", "{", "$u7d$", "}", "$u7e$", "~", "..", "::")
)

// RustLegacySpelling accepts frames whose llvm-symbolizer name is the Itanium reading of a
// Rust legacy symbol: ours with the "::h<hash>" suffix and "$LT$"-style escapes.
func RustLegacySpelling(d Diff) (string, bool) {
	if d.Kind != KindChain || len(d.Ours) != len(d.Ref) {
		return "", false
	}
	found := false
	for i := range d.Ours {
		o, r := d.Ours[i].Function, d.Ref[i].Function
		if o == r {
			continue
		}
		if !rustHash.MatchString(r) || rustEscapes.Replace(rustHash.ReplaceAllString(r, "")) != o {
			return "", false
		}
		found = true
	}
	return ReasonRustLegacy, found
}

// ReasonLLVMUndemangled: LLVM 14's demangler gives up on some names and prints them mangled.
const ReasonLLVMUndemangled = "LLVM 14 demangler failure: llvm-symbolizer prints the mangled name (it cannot parse e.g. " +
	"sr-qualified expressions in enable_if return types); ours demangles it, as GNU c++filt does"

// Undemangled accepts frames where llvm-symbolizer printed our frame's linkage name itself.
func Undemangled(d Diff) (string, bool) {
	if d.Kind != KindChain || len(d.Ours) != len(d.Ref) {
		return "", false
	}
	found := false
	for i := range d.Ours {
		o, r := d.Ours[i], d.Ref[i]
		if o.Function == r.Function {
			continue
		}
		if !strings.HasPrefix(r.Function, "_Z") || r.Function != o.LinkageName {
			return "", false
		}
		found = true
	}
	return ReasonLLVMUndemangled, found
}
