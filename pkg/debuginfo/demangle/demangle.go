// Package demangle turns C++ (Itanium) and Rust (legacy and v0) linkage names into the
// readable names profiles show, matching what llvm-symbolizer 14 prints for the same symbol.
//
// The common shapes of Itanium names (90% of a distribution's) are read by a one-pass parser
// of this package (fastpath.go) that prints into a pooled buffer, one allocation a name. The
// others are parsed by github.com/ianlancetaylor/demangle, with its LLVM-style printing; this
// package corrects what that module gets wrong around it (itanium.go, rustv0.go: the mangled
// name rewritten before the module reads it, or the module's syntax tree corrected before it is
// printed) and adjusts the few spellings where LLVM 14 prints differently, so that a name
// resolved from DWARF, from the symbol table or by llvm-symbolizer reads the same. The fast
// path answers what the module's way does wherever it answers (TestFastPathAgrees,
// FuzzFastPath). Legacy Rust names are decoded here. docs/design/0005-demangler.md says why
// and measures it.
//
// Deliberate differences from LLVM 14 (testdata/cases.tsv lists each case with its reason):
//   - Legacy Rust names (_ZN...17h<hash>E): LLVM demangles them as plain Itanium names and
//     leaves rustc's escapes in ("_$LT$T$u20$as$u20$core..any..Any$GT$"); we decode them as
//     rustc's own demangler does ("<T as core::any::Any>") and keep the hash as LLVM does;
//     escapes of code points past ASCII stay in, as GNU c++filt and LLVM leave them.
//   - Names LLVM 14 cannot demangle or prints wrongly (GCC transactional-memory clones
//     "_ZGTt...", a destructor of an ABI-tagged class printed as "~()", parameters of generic
//     lambdas printed as "auto") get the correct demangling.
package demangle

import (
	"strings"
	"unicode"

	"github.com/ianlancetaylor/demangle"
)

// maxOutput bounds the demangled length: hostile names can expand exponentially through
// substitutions and backrefs, and a name longer than this is useless in a profile.
const maxOutput = 1 << 16

// maxInput bounds the mangled length we parse: the parser recurses about once per byte of a
// deeply nested name. The longest of the 47,582 names of the differential test's corpus is
// 583 bytes; heavily templated C++ reaches a few KiB.
const maxInput = 1 << 15

var opts = []demangle.Option{demangle.LLVMStyle, demangle.MaxLength(16)}

// Name returns the demangled form of a linkage name, or name itself when it is not mangled
// or cannot be demangled. It allocates nothing for names that are not mangled.
func Name(name string) (out string) {
	k := kind(name)
	if k == plain || len(name) > maxInput {
		return name
	}
	// Names come from untrusted files; a parser bug must cost one name, not the process.
	defer func() {
		if recover() != nil {
			out = name
		}
	}()
	switch k {
	case itanium:
		return itaniumName(name)
	case rustV0Name:
		if out, ok := rustV0String(name); ok {
			return out
		}
	}
	return name
}

type scheme uint8

const (
	plain scheme = iota
	itanium
	rustV0Name
)

// kind classifies name the way LLVM 14's nonMicrosoftDemangle does: Itanium when one to four
// underscores precede a 'Z' (the extra underscores are Mach-O and Apple block spellings),
// Rust v0 when it starts with "_R".
func kind(name string) scheme {
	if len(name) < 2 || name[0] != '_' {
		return plain
	}
	if name[1] == 'R' {
		return rustV0Name
	}
	for i := 1; i < len(name) && i <= 4; i++ {
		switch name[i] {
		case 'Z':
			return itanium
		case '_':
			continue
		}
		return plain
	}
	return plain
}

func itaniumName(name string) string {
	if base, hash, suffix, ok := legacyRust(name); ok {
		if out, ok := rustLegacyPath(base[3:len(base)-20], hash); ok {
			return withSuffix(out, suffix)
		}
		// Not a well-formed legacy Rust path: print it as the Itanium name LLVM sees.
	}
	// LLVM treats everything from the first '.' after the encoding as one clone or vendor
	// suffix and prints it in one parenthesis ("f() (.constprop.0.cold)"); the module's parser
	// would split ".constprop.0" and ".cold" and rejects suffixes it does not know. The
	// grammar has no '.' outside source names, and those are rare: GCC names a coroutine's
	// frame type "<encoding>.Frame" in its actor and destroy clones
	// (_ZN1f...E25_ZN5probe7counterEi.Frame.actor). A cut inside a source name leaves that
	// name short of its length, so the encoding ends at the first '.' where the name before
	// it parses.
	if out, ok := fastName(name); ok {
		return out
	}
	from := 0
	for range maxSuffixCuts {
		i := strings.IndexByte(name[from:], '.')
		if i < 0 {
			break
		}
		i += from
		if i == 0 {
			return name
		}
		if out, ok := itaniumString(name[:i]); ok {
			return withSuffix(llvmAngles(out), name[i:])
		}
		from = i + 1
	}
	if from > 0 {
		return name
	}
	out, ok := itaniumString(name)
	if !ok {
		return name
	}
	return llvmAngles(out)
}

// fastName demangles name on the fast path (fastpath.go), its clone suffix (from the first
// '.') in LLVM's spelling; false where the fast path declines.
func fastName(name string) (string, bool) {
	if fastDisabled {
		return "", false
	}
	for i := 0; i < len(name); i++ {
		if name[i] == '.' {
			return fastItanium(name[:i], name[i:])
		}
	}
	return fastItanium(name, "")
}

// fastDisabled turns the fast path off, for the tests that compare it with the module's way.
var fastDisabled bool

// maxSuffixCuts bounds the '.' a name's encoding is tried to end at: compilers put at most
// one in a source name (a coroutine frame's ".Frame").
const maxSuffixCuts = 4

// rustLegacyPath decodes the length-prefixed path elements of a legacy Rust name (without
// "_ZN" and the hash element) the way rustc-demangle does, and appends "::"+hash.
func rustLegacyPath(s, hash string) (string, bool) {
	var b strings.Builder
	b.Grow(len(s) + len(hash) + 8)
	for len(s) > 0 {
		n, i := 0, 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			n = n*10 + int(s[i]-'0')
			if n > len(s) {
				return "", false
			}
			i++
		}
		if i == 0 || n == 0 || len(s)-i < n {
			return "", false
		}
		elem := s[i : i+n]
		s = s[i+n:]
		for j := 0; j < len(elem); j++ {
			if elem[j] >= 0x80 {
				return "", false
			}
		}
		if b.Len() > 0 {
			b.WriteString("::")
		}
		writeRustElem(&b, elem)
	}
	if b.Len() > 0 {
		b.WriteString("::")
	}
	b.WriteString(hash)
	return b.String(), true
}

var rustEscapes = map[string]string{
	"SP": "@", "BP": "*", "RF": "&", "LT": "<", "GT": ">", "LP": "(", "RP": ")", "C": ",",
}

// writeRustElem follows rustc-demangle's legacy element printing: "_$" loses its '_',
// ".." is "::", "$XX$" escapes and "$u<hex>$" code points are decoded, and decoding stops
// (leaving the rest verbatim) at the first escape it does not know.
func writeRustElem(b *strings.Builder, rest string) {
	if strings.HasPrefix(rest, "_$") {
		rest = rest[1:]
	}
	for len(rest) > 0 {
		switch rest[0] {
		case '.':
			if len(rest) > 1 && rest[1] == '.' {
				b.WriteString("::")
				rest = rest[2:]
			} else {
				b.WriteByte('.')
				rest = rest[1:]
			}
			continue
		case '$':
			end := strings.IndexByte(rest[1:], '$')
			if end < 0 {
				b.WriteString(rest)
				return
			}
			esc := rest[1 : end+1]
			if r, ok := rustEscapes[esc]; ok {
				b.WriteString(r)
				rest = rest[end+2:]
				continue
			}
			if c, ok := rustCodePoint(esc); ok {
				b.WriteRune(c)
				rest = rest[end+2:]
				continue
			}
			b.WriteString(rest)
			return
		}
		i := strings.IndexAny(rest, "$.")
		if i < 0 {
			b.WriteString(rest)
			return
		}
		b.WriteString(rest[:i])
		rest = rest[i:]
	}
}

// rustCodePoint decodes "u<lower hex>" into a printable ASCII character. Code points past
// ASCII stay escaped, as GNU c++filt and LLVM leave them (rustc-demangle would decode them).
func rustCodePoint(esc string) (rune, bool) {
	if len(esc) < 2 || len(esc) > 3 || esc[0] != 'u' {
		return 0, false
	}
	var v rune
	for i := 1; i < len(esc); i++ {
		c := esc[i]
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			v = v<<4 | rune(c-'a'+10)
		default:
			return 0, false
		}
	}
	if v >= 0x80 || unicode.IsControl(v) {
		return 0, false
	}
	return v, true
}

func withSuffix(s, suffix string) string {
	if suffix == "" {
		return s
	}
	return s + " (" + suffix + ")"
}

// legacyRust splits a legacy Rust name "_ZN<path>17h<16 hex>E[.suffix]" into the part the
// module's parser decodes, the hash ("h0123456789abcdef") and the suffix.
func legacyRust(name string) (base, hash, suffix string, ok bool) {
	if !strings.HasPrefix(name, "_ZN") {
		return "", "", "", false
	}
	base = name
	if i := strings.Index(name, "E."); i > 0 {
		base, suffix = name[:i+1], name[i+1:]
	}
	n := len(base)
	if n < 24 || base[n-1] != 'E' || base[n-20:n-17] != "17h" {
		return "", "", "", false
	}
	for i := n - 17; i < n-1; i++ {
		c := base[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return "", "", "", false
		}
	}
	return base, base[n-18 : n-1], suffix, true
}

// llvmAngles puts a space between two closing angle brackets of template argument lists
// ("A<B<int> >"), as LLVM 14's Itanium printer does. ">>" stays where it is an operator:
// in an operator name ("operator>>", "operator>>=") or a binary expression, which LLVM
// prints with spaces around it.
func llvmAngles(s string) string {
	// The Go printer separates an operator name ending in '<' from its template arguments
	// ("operator<< <T>"); LLVM 14 does not.
	if strings.Contains(s, "< <") {
		s = strings.ReplaceAll(s, "operator<< <", "operator<<<")
		s = strings.ReplaceAll(s, "operator< <", "operator<<")
	}
	i := strings.Index(s, ">>")
	if i < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	last := 0
	for ; i < len(s)-1; i++ {
		if s[i] != '>' || s[i+1] != '>' {
			continue
		}
		if strings.HasSuffix(s[:i], "operator") {
			i++ // skip the operator's second '>'
			continue
		}
		if i > 0 && s[i-1] == ' ' {
			i++
			continue
		}
		b.WriteString(s[last : i+1])
		b.WriteByte(' ')
		last = i + 1
	}
	b.WriteString(s[last:])
	return b.String()
}
