package demangle

import "sync"

// The fast path demangles the common shapes of Itanium names in one pass, printing as it
// reads into pooled buffers: one allocation a name, the result. It reads nested and unscoped
// names, std::, constructors and destructors, operator names, ABI tags, the anonymous
// namespace, template arguments (types; integer, bool and enumerator literals; packs), the
// builtin, qualified, pointer and reference types, function types and pointers or references
// to them, substitutions, the encoding's template parameters, the expansion of a parameter pack
// of the encoding in its parameters ("DpOT_": emplace_back, make_unique), local names and
// closures without templates inside ("f(int)::'lambda'(int)"), vtables, typeinfo, VTTs, thunks
// and guard variables. Everything else (expressions, arrays, member pointers, unnamed types,
// vendor extensions, local names with templates or template parameters inside) makes it
// decline, and the name goes the module's way (itaniumString). Its answer must be the
// module's, corrected and spelled as itaniumName prints it: TestFastPathAgrees and
// FuzzFastPath compare the two.

// fastState is the fast path's scratch: the text of every piece parsed (substitution
// candidates and template arguments are ranges of it) and the output.
type fastState struct {
	s     string
	pos   int
	text  []byte // pieces, appended as they are read
	subs  []piece
	targs []piece // the encoding's template arguments (T_ refers to them)
	args  []piece // a stack of the template arguments being read
	elems []piece // the elements of the argument packs read
	out   []byte
	depth int
	fail  bool
	// collapses counts the references to references collapsed (pointerTo): the module
	// collapses them except in a closure's parameters.
	collapses int
	// tagging: the encoding's template arguments are being read (a T_ among them would
	// refer to the ones before).
	tagging bool
	// templated: the encoding's name ends in template arguments, which its T_ refer to
	// (the module reads a T_ nowhere else).
	templated bool
}

// A piece is a range of fastState.text and what kind of type it prints.
type piece struct {
	start, end int32
	ref        uint8 // 0, refLValue or refRValue: the piece is a reference type
	cv         uint8 // the qualifiers of a qualified type (cvConst, cvVolatile, cvRestrict)
	// A function type: fnBare "R (P)" or fnDeclarator "R (*)(P)", a pointer or reference to
	// one; mid is where, from start, the parameters' "(" (fnBare) or the declarator's ")"
	// (fnDeclarator) is.
	fn   uint8
	mid  int32
	pack bool // an argument pack, or a substitution candidate read inside a pack expansion
	// An argument pack's elements: elems[elem:elem+nelem] of fastState.
	elem, nelem int32
}

const (
	fnBare = 1 + iota
	fnDeclarator
)

const (
	refLValue = 1
	refRValue = 2
)

// fastMaxDepth bounds the nesting of template arguments and types the fast path follows;
// fastMaxText bounds the text it builds (a name past either goes the module's way, which
// has the bounds on hostile names).
const (
	fastMaxDepth = 48
	fastMaxText  = 1 << 14
)

var fastPool = sync.Pool{New: func() any {
	return &fastState{text: make([]byte, 0, 1024), out: make([]byte, 0, 512), subs: make([]piece, 0, 32)}
}}

// fastItanium demangles name (an Itanium name, "_Z"..., without a clone suffix) and appends
// suffix in LLVM's spelling (" (.cold)"), or reports false where the fast path does not
// handle the name.
func fastItanium(name, suffix string) (string, bool) {
	if len(name) < 3 || name[0] != '_' || name[1] != 'Z' {
		return "", false
	}
	st := fastPool.Get().(*fastState)
	st.s, st.pos, st.depth, st.fail, st.tagging, st.templated = name, 2, 0, false, false, false
	st.text, st.subs, st.targs, st.args, st.out = st.text[:0], st.subs[:0], st.targs[:0], st.args[:0], st.out[:0]
	st.elems = st.elems[:0]
	st.encoding()
	ok := !st.fail && st.pos == len(st.s) && len(st.text) <= fastMaxText
	var out string
	if ok {
		if suffix != "" {
			st.out = append(st.out, " ("...)
			st.out = append(st.out, suffix...)
			st.out = append(st.out, ')')
		}
		out = string(st.out)
	}
	if cap(st.text) <= 1<<16 && cap(st.out) <= 1<<16 {
		st.s = ""
		fastPool.Put(st)
	}
	return out, ok
}

func (st *fastState) peek(i int) byte {
	if st.pos+i < len(st.s) {
		return st.s[st.pos+i]
	}
	return 0
}

func (st *fastState) decline() { st.fail = true; st.pos = len(st.s) }

// encoding reads <encoding> or <special-name> after "_Z" and prints it to st.out.
func (st *fastState) encoding() {
	switch st.peek(0) {
	case 'T':
		var prefix string
		switch st.peek(1) {
		case 'V':
			prefix = "vtable for "
		case 'I':
			prefix = "typeinfo for "
		case 'S':
			prefix = "typeinfo name for "
		case 'T':
			prefix = "VTT for "
		case 'h', 'v':
			st.thunk()
			return
		default:
			st.decline()
			return
		}
		st.pos += 2
		t := st.typ()
		if st.fail || t.ref != 0 {
			st.decline() // the module does not collapse a reference to a reference here
			return
		}
		st.out = append(st.out, prefix...)
		st.out = append(st.out, st.text[t.start:t.end]...)
		return
	case 'G':
		if st.peek(1) != 'V' {
			st.decline()
			return
		}
		st.pos += 2
		st.out = append(st.out, "guard variable for "...)
		st.function()
		return
	}
	st.function()
}

// thunk reads "Th <offset> _ <encoding>" and "Tv <offset> _ <offset> _ <encoding>".
func (st *fastState) thunk() {
	virtual := st.peek(1) == 'v'
	st.pos += 2
	st.callOffset()
	if virtual {
		st.callOffset()
	}
	if st.fail {
		return
	}
	if virtual {
		st.out = append(st.out, "virtual thunk to "...)
	} else {
		st.out = append(st.out, "non-virtual thunk to "...)
	}
	st.function()
}

// callOffset skips "[n]<digits>_".
func (st *fastState) callOffset() {
	if st.peek(0) == 'n' {
		st.pos++
	}
	start := st.pos
	for isDigit(st.peek(0)) {
		st.pos++
	}
	// The module reads an offset as an int and refuses one past it (FuzzFastPath's find):
	// nine digits always fit.
	if st.pos == start || st.pos-start > 9 || st.peek(0) != '_' {
		st.decline()
		return
	}
	st.pos++
}

// function reads <name> [<bare-function-type>] and prints it; a special name's encoding
// (a thunk's, a guard variable's) must be all of what is left.
func (st *fastState) function() {
	nm := st.name(true)
	if st.fail {
		return
	}
	if st.pos == len(st.s) {
		// A variable.
		if nm.cvref != 0 {
			st.decline()
			return
		}
		st.out = append(st.out, st.text[nm.p.start:nm.p.end]...)
		return
	}
	var ret piece
	st.templated = nm.template
	hasRet := nm.template && !nm.ctor
	if hasRet {
		ret = st.typ()
		if st.fail {
			return
		}
		if ret.start == ret.end || ret.fn != 0 || st.pos == len(st.s) {
			st.decline() // a template function has a return type and parameters
			return
		}
	}
	// Parameters: read onto the argument stack, then printed.
	base := len(st.args)
	if st.peek(0) == 'v' && st.pos+1 == len(st.s) {
		st.pos++
	} else {
		for st.pos < len(st.s) {
			t := st.typ()
			if st.fail {
				return
			}
			st.args = append(st.args, t)
		}
	}
	if hasRet {
		st.out = append(st.out, st.text[ret.start:ret.end]...)
		st.out = append(st.out, ' ')
	}
	st.out = append(st.out, st.text[nm.p.start:nm.p.end]...)
	st.out = append(st.out, '(')
	first := true
	for _, t := range st.args[base:] {
		if t.start == t.end {
			continue // an empty pack expansion
		}
		if !first {
			st.out = append(st.out, ", "...)
		}
		first = false
		if len(st.out) > fastMaxText {
			st.decline()
			return
		}
		st.out = append(st.out, st.text[t.start:t.end]...)
	}
	st.args = st.args[:base]
	st.out = append(st.out, ')')
	st.out = appendMethodQualifiers(st.out, nm.cvref)
}

const (
	cvConst = 1 << iota
	cvVolatile
	cvRestrict
	cvLRef
	cvRRef
)

// A fastParsed is a name as read: its text, whether it ends in template arguments (a
// function template has a return type), whether it is a constructor or destructor, and the
// qualifiers of a member function.
type fastParsed struct {
	p        piece
	base     int32 // where an unqualified name's ABI tags start
	template bool
	ctor     bool
	cvref    uint8
}

// name reads <name>: a nested name, an unscoped name (possibly in std::) or a substitution,
// with template arguments. At the encoding's level (enc) template arguments are recorded
// for T_.
func (st *fastState) name(enc bool) fastParsed {
	var nm fastParsed
	switch st.peek(0) {
	case 'N':
		return st.nested(enc)
	case 'Z':
		return st.localName()
	case 'S':
		if st.peek(1) == 't' {
			st.pos += 2
			u, ok := st.unqualified(-1, &nm)
			if !ok {
				return nm
			}
			nm.p = st.concat(st.literalText("std"), "::", u)
		} else {
			// A substitution: a template's name, which template arguments must follow.
			s, ok := st.substitution()
			if !ok || st.peek(0) != 'I' {
				st.decline()
				return nm
			}
			a := st.templateArgs(enc)
			if st.fail {
				return nm
			}
			nm.p = st.concat(s, "", a)
			nm.template = true
			return nm
		}
	default:
		u, ok := st.unqualified(-1, &nm)
		if !ok {
			return nm
		}
		nm.p = u
	}
	if st.peek(0) == 'I' {
		st.addSub(nm.p)
		a := st.templateArgs(enc)
		if st.fail {
			return nm
		}
		nm.p = st.concat(nm.p, "", a)
		nm.template = true
	}
	return nm
}

// nested reads "N [<CV-qualifiers>] [<ref-qualifier>] <prefix> <unqualified-name> E".
func (st *fastState) nested(enc bool) fastParsed {
	var nm fastParsed
	st.pos++
	if st.peek(0) == 'r' {
		nm.cvref |= cvRestrict
		st.pos++
	}
	if st.peek(0) == 'V' {
		nm.cvref |= cvVolatile
		st.pos++
	}
	if st.peek(0) == 'K' {
		nm.cvref |= cvConst
		st.pos++
	}
	switch st.peek(0) {
	case 'R':
		nm.cvref |= cvLRef
		st.pos++
	case 'O':
		nm.cvref |= cvRRef
		st.pos++
	}
	var cur piece  // the name so far
	ctorName := -1 // the range of the last component's own name (start<<32 | end)
	components := 0
	for {
		if st.fail {
			return nm
		}
		c := st.peek(0)
		if c == 'E' {
			st.pos++
			break
		}
		if c == 0 {
			st.decline()
			return nm
		}
		nm.template = false
		if c != 'I' {
			nm.ctor = false
		}
		switch {
		case c == 'S' && st.peek(1) == 't' && components == 0:
			st.pos += 2
			cur = st.literalText("std")
			components++
			continue // not a candidate
		case c == 'S' && components == 0:
			s, ok := st.substitution()
			if !ok {
				st.decline()
				return nm
			}
			cur = s
			ctorName = st.baseName(s)
			components++
			continue // a substitution is not a candidate again
		case c == 'I':
			if components == 0 {
				st.decline()
				return nm
			}
			a := st.templateArgs(enc)
			if st.fail {
				return nm
			}
			cur = st.concat(cur, "", a)
			nm.template = true // a constructor of a template is named without its arguments
		default:
			var inner fastParsed
			u, ok := st.unqualified(ctorName, &inner)
			if !ok {
				return nm
			}
			switch {
			case inner.ctor:
				nm.ctor = true
				ctorName = -1 // a constructor named after one goes the module's way
			case c == 'U':
				ctorName = -1 // a closure's constructor goes the module's way
			default:
				// A constructor is named without the class's ABI tags.
				ctorName = int(u.start)<<32 | int(inner.base)
			}
			if components == 0 {
				cur = u
			} else {
				cur = st.concat(cur, "::", u)
			}
		}
		components++
		st.addSub(cur)
	}
	if components == 0 || len(st.subs) == 0 {
		st.decline()
		return nm
	}
	st.subs = st.subs[:len(st.subs)-1] // the whole name is no candidate
	nm.p = cur
	return nm
}

// concat appends a, sep and b to text and returns the range.
func (st *fastState) concat(a piece, sep string, b piece) piece {
	start := len(st.text)
	st.copyText(a.start, a.end)
	st.text = append(st.text, sep...)
	st.copyText(b.start, b.end)
	return piece{start: int32(start), end: int32(len(st.text))}
}

// baseName returns the range (start<<32 | end) of the name a constructor of the
// substituted prefix s is named by: the text after its last "::", or -1 where the prefix
// does not end in a plain name (template arguments, an anonymous namespace).
func (st *fastState) baseName(s piece) int {
	t := st.text[s.start:s.end]
	i := len(t)
	for i > 0 && t[i-1] != ':' {
		c := t[i-1]
		if c == '>' || c == ')' || c == ']' || c == ' ' {
			return -1
		}
		i--
	}
	if i == len(t) {
		return -1
	}
	return int(s.start+int32(i))<<32 | int(s.end)
}

// unqualified reads an <unqualified-name> (source name, operator name, constructor or
// destructor, with ABI tags) and returns its text. ctorName is the range (start<<32|end)
// of the name a constructor is named by, or -1. It reports false when it declined.
func (st *fastState) unqualified(ctorName int, nm *fastParsed) (piece, bool) {
	c := st.peek(0)
	if c == 'U' {
		return st.closure(nm)
	}
	if c == 'L' {
		// Internal linkage, before a source name only.
		st.pos++
		if c = st.peek(0); !isDigit(c) {
			st.decline()
			return piece{}, false
		}
	}
	start := len(st.text)
	switch {
	case isDigit(c):
		if !st.sourceName() {
			return piece{}, false
		}
	case c == 'C' || c == 'D':
		kind := st.peek(1)
		if c == 'C' && (kind < '1' || kind > '5') || c == 'D' && (kind != '0' && kind != '1' && kind != '2' && kind != '4' && kind != '5') || ctorName < 0 {
			st.decline()
			return piece{}, false
		}
		st.pos += 2
		if c == 'D' {
			st.text = append(st.text, '~')
		}
		s, e := ctorName>>32, ctorName&(1<<32-1)
		st.copyText(int32(s), int32(e))
		nm.ctor = true
	case c >= 'a' && c <= 'z':
		op, ok := operatorNames[[2]byte{c, st.peek(1)}]
		if !ok {
			st.decline()
			return piece{}, false
		}
		st.pos += 2
		st.text = append(st.text, "operator"...)
		st.text = append(st.text, op...)
	default:
		st.decline()
		return piece{}, false
	}
	nm.base = int32(len(st.text))
	for st.peek(0) == 'B' {
		if nm.ctor {
			st.decline()
			return piece{}, false
		}
		st.pos++
		st.text = append(st.text, "[abi:"...)
		if !st.sourceName() {
			return piece{}, false
		}
		st.text = append(st.text, ']')
	}
	return piece{start: int32(start), end: int32(len(st.text))}, true
}

// localName reads "Z <encoding> E <entity> [<discriminator>]" and returns its text,
// "f(int)::x", "f(int)::'lambda'(int)", with the entity's qualifiers (a const member
// function of a closure: "NKUlvE_clE"). The encoding is a function's name and parameters,
// no template, or a name alone (GCC's "Z4mainE"); the entity a source name, a closure type
// or a nested name, no template either. Template parameters anywhere inside make it decline:
// where a name has two encodings the module binds them across (localTemplateParams), and a
// closure's parameter of a generic lambda prints as GNU's, not LLVM's "auto".
func (st *fastState) localName() fastParsed {
	var nm fastParsed
	st.pos++ // 'Z'
	if c := st.peek(0); c != 'N' && c != 'L' && !isDigit(c) {
		st.decline() // special names, substitutions, nested local names
		return nm
	}
	templated := st.templated
	st.templated = false
	defer func() { st.templated = templated }()
	fn := st.name(false)
	if st.fail || fn.template || fn.ctor {
		st.decline()
		return nm
	}
	var start int
	if st.peek(0) == 'E' {
		if fn.cvref != 0 {
			st.decline()
			return nm
		}
		start = len(st.text)
		st.copyText(fn.p.start, fn.p.end)
	} else {
		// The parameters are read (their text appended) before the name is written.
		base := len(st.args)
		if st.peek(0) == 'v' && st.peek(1) == 'E' {
			st.pos++
		} else {
			for st.peek(0) != 'E' {
				if st.peek(0) == 0 {
					st.decline()
					return nm
				}
				t := st.typ()
				if st.fail {
					return nm
				}
				st.args = append(st.args, t)
			}
		}
		start = len(st.text)
		st.copyText(fn.p.start, fn.p.end)
		st.parameters(base)
		st.text = appendMethodQualifiers(st.text, fn.cvref)
	}
	st.pos++ // 'E'
	end := len(st.text)
	var ent fastParsed
	switch c := st.peek(0); {
	case c == 'N':
		ent = st.nested(false)
	case isDigit(c) || c == 'L' || c == 'U':
		u, ok := st.unqualified(-1, &ent)
		if !ok {
			return nm
		}
		ent.p = u
	default:
		st.decline() // string literals, default arguments, substitutions
		return nm
	}
	if st.fail || ent.template || ent.ctor || st.peek(0) == 'I' {
		st.decline()
		return nm
	}
	// <discriminator>: "_ <digit>" or "__ <number> _", printed as nothing.
	if st.peek(0) == '_' {
		st.pos++
		long := st.peek(0) == '_'
		if long {
			st.pos++
		}
		d := st.pos
		for isDigit(st.peek(0)) {
			st.pos++
		}
		switch {
		case st.pos == d || !long && st.pos-d > 1:
			st.decline()
			return nm
		case long:
			if st.pos-d < 2 || st.peek(0) != '_' {
				st.decline()
				return nm
			}
			st.pos++
		}
	}
	nm.p = st.concat(piece{start: int32(start), end: int32(end)}, "::", ent.p)
	nm.cvref = ent.cvref
	return nm
}

// closure reads a closure type "Ul <parameter types> E [<number>] _" and returns its text as
// LLVM prints it, "'lambda'(int)", "'lambda0'()". A template parameter among the parameters
// (a generic lambda) makes it decline.
func (st *fastState) closure(nm *fastParsed) (piece, bool) {
	if st.peek(1) != 'l' {
		st.decline() // unnamed types, vendor qualifiers
		return piece{}, false
	}
	st.pos += 2
	if st.peek(0) == 'E' {
		st.decline() // no parameter types, not even "v"
		return piece{}, false
	}
	templated, collapses := st.templated, st.collapses
	st.templated = false
	base := len(st.args)
	if st.peek(0) == 'v' && st.peek(1) == 'E' {
		st.pos++
	} else {
		for st.peek(0) != 'E' {
			if st.peek(0) == 0 {
				st.decline()
				break
			}
			t := st.typ()
			if st.fail {
				break
			}
			st.args = append(st.args, t)
		}
	}
	st.templated = templated
	if st.collapses != collapses {
		st.decline() // the module prints a closure's "RRa" as "signed char&&"
	}
	if st.fail {
		return piece{}, false
	}
	st.pos++ // 'E'
	d := st.pos
	for isDigit(st.peek(0)) {
		st.pos++
	}
	if st.peek(0) != '_' {
		st.decline()
		return piece{}, false
	}
	number := st.s[d:st.pos]
	if len(number) > 9 {
		st.decline()
		return piece{}, false
	}
	// Printed as the number it is: "00" is 0.
	for len(number) > 1 && number[0] == '0' {
		number = number[1:]
	}
	st.pos++
	if st.peek(0) == 'B' {
		st.decline() // ABI tags on a closure
		return piece{}, false
	}
	start := len(st.text)
	st.text = append(st.text, "'lambda"...)
	st.text = append(st.text, number...)
	st.text = append(st.text, '\'')
	st.parameters(base)
	nm.base = int32(len(st.text))
	return piece{start: int32(start), end: int32(len(st.text))}, !st.fail
}

// parameters appends "(P1, P2)" of the parameter types st.args[base:] (empty pack expansions
// left out) to text and pops them.
func (st *fastState) parameters(base int) {
	st.text = append(st.text, '(')
	first := true
	for _, t := range st.args[base:] {
		if t.start == t.end {
			continue
		}
		if !first {
			st.text = append(st.text, ", "...)
		}
		first = false
		st.copyText(t.start, t.end)
	}
	st.text = append(st.text, ')')
	st.args = st.args[:base]
}

// appendMethodQualifiers appends a member function's qualifiers, " const", " &&".
func appendMethodQualifiers(b []byte, cvref uint8) []byte {
	if cvref&cvConst != 0 {
		b = append(b, " const"...)
	}
	if cvref&cvVolatile != 0 {
		b = append(b, " volatile"...)
	}
	if cvref&cvRestrict != 0 {
		b = append(b, " restrict"...)
	}
	if cvref&cvLRef != 0 {
		b = append(b, " &"...)
	}
	if cvref&cvRRef != 0 {
		b = append(b, " &&"...)
	}
	return b
}

// sourceName reads "<length> <identifier>" and appends the identifier.
func (st *fastState) sourceName() bool {
	n := 0
	for isDigit(st.peek(0)) {
		n = n*10 + int(st.peek(0)-'0')
		st.pos++
		if n > len(st.s) {
			st.decline()
			return false
		}
	}
	if n == 0 || st.pos+n > len(st.s) {
		st.decline()
		return false
	}
	id := st.s[st.pos : st.pos+n]
	st.pos += n
	if len(id) >= 10 && id[:10] == "_GLOBAL__N" {
		st.text = append(st.text, "(anonymous namespace)"...)
		return true
	}
	for i := 0; i < len(id); i++ {
		// Other characters ('.' and '$' of compiler-made names, or the punctuation of a
		// malformed name) go the module's way.
		if c := id[i]; !isIdentByte(c) {
			st.decline()
			return false
		}
	}
	st.text = append(st.text, id...)
	return true
}

// operatorNames spells the <operator-name>s the fast path reads, as the module prints them
// after "operator".
var operatorNames = map[[2]byte]string{
	{'n', 'w'}: " new", {'n', 'a'}: " new[]", {'d', 'l'}: " delete", {'d', 'a'}: " delete[]",
	{'p', 's'}: "+", {'n', 'g'}: "-", {'a', 'd'}: "&", {'d', 'e'}: "*", {'c', 'o'}: "~",
	{'p', 'l'}: "+", {'m', 'i'}: "-", {'m', 'l'}: "*", {'d', 'v'}: "/", {'r', 'm'}: "%",
	{'a', 'n'}: "&", {'o', 'r'}: "|", {'e', 'o'}: "^", {'a', 'S'}: "=", {'p', 'L'}: "+=",
	{'m', 'I'}: "-=", {'m', 'L'}: "*=", {'d', 'V'}: "/=", {'r', 'M'}: "%=", {'a', 'N'}: "&=",
	{'o', 'R'}: "|=", {'e', 'O'}: "^=", {'l', 's'}: "<<", {'r', 's'}: ">>", {'l', 'S'}: "<<=",
	{'r', 'S'}: ">>=", {'e', 'q'}: "==", {'n', 'e'}: "!=", {'l', 't'}: "<", {'g', 't'}: ">",
	{'l', 'e'}: "<=", {'g', 'e'}: ">=", {'s', 's'}: "<=>", {'n', 't'}: "!", {'a', 'a'}: "&&",
	{'o', 'o'}: "||", {'p', 'p'}: "++", {'m', 'm'}: "--", {'c', 'm'}: ",", {'p', 'm'}: "->*",
	{'p', 't'}: "->", {'c', 'l'}: "()", {'i', 'x'}: "[]",
}

// substitution reads "S_", "S<seq-id>_" or one of St's abbreviations the fast path prints
// (Sa, Sb) and returns its text.
func (st *fastState) substitution() (piece, bool) {
	st.pos++ // 'S'
	c := st.peek(0)
	switch c {
	case 'a', 'b':
		st.pos++
		start := len(st.text)
		if c == 'a' {
			st.text = append(st.text, "std::allocator"...)
		} else {
			st.text = append(st.text, "std::basic_string"...)
		}
		return piece{start: int32(start), end: int32(len(st.text))}, true
	case '_':
		st.pos++
		if len(st.subs) == 0 || st.subs[0].pack {
			return piece{}, false
		}
		return st.subs[0], true
	}
	n, ok := st.seq()
	if !ok || st.peek(0) != '_' {
		return piece{}, false
	}
	st.pos++
	n++
	if n >= len(st.subs) || st.subs[n].pack {
		return piece{}, false
	}
	return st.subs[n], true
}

// copyText appends text[start:end] to text, or declines when text would grow past
// fastMaxText (substitutions let a hostile name double it at every step).
func (st *fastState) copyText(start, end int32) {
	if len(st.text)+int(end-start) > fastMaxText {
		st.decline()
		return
	}
	st.text = append(st.text, st.text[start:end]...)
}

func (st *fastState) addSub(p piece) { st.subs = append(st.subs, p) }

// templateArgs reads "I <template-arg>+ E" and returns "<...>"; at the encoding's level
// (enc) the arguments become the ones T_ refers to.
func (st *fastState) templateArgs(enc bool) piece {
	st.pos++ // 'I'
	if st.depth++; st.depth > fastMaxDepth || len(st.text) > fastMaxText {
		st.decline()
		return piece{}
	}
	if enc {
		if st.tagging {
			st.decline()
			return piece{}
		}
		st.tagging = true
	}
	base := len(st.args)
	for !st.fail {
		c := st.peek(0)
		if c == 'E' {
			st.pos++
			break
		}
		var a piece
		switch c {
		case 0, 'X':
			st.decline()
			return piece{}
		case 'J':
			a = st.pack()
		case 'L':
			a = st.literal()
		default:
			a = st.typ()
		}
		if st.fail {
			return piece{}
		}
		st.args = append(st.args, a)
	}
	args := st.args[base:]
	if len(args) == 0 {
		st.decline() // no arguments
		return piece{}
	}
	start := len(st.text)
	st.text = append(st.text, '<')
	first := true
	for _, a := range args {
		if a.start == a.end {
			continue // an empty pack
		}
		if !first {
			st.text = append(st.text, ", "...)
		}
		first = false
		st.copyText(a.start, a.end)
	}
	if st.text[len(st.text)-1] == '>' {
		st.text = append(st.text, ' ')
	}
	st.text = append(st.text, '>')
	if enc {
		st.targs = append(st.targs[:0], args...)
		st.tagging = false
	}
	st.args = st.args[:base]
	st.depth--
	return piece{start: int32(start), end: int32(len(st.text))}
}

// pack reads an argument pack "J <template-arg>* E" and returns its arguments' text, joined
// as in a template argument list.
func (st *fastState) pack() piece {
	st.pos++ // 'J'
	base := len(st.args)
	for !st.fail {
		var a piece
		switch st.peek(0) {
		case 'E':
			st.pos++
			start := len(st.text)
			for i, a := range st.args[base:] {
				if i > 0 {
					st.text = append(st.text, ", "...)
				}
				st.copyText(a.start, a.end)
			}
			elem := len(st.elems)
			st.elems = append(st.elems, st.args[base:]...)
			st.args = st.args[:base]
			return piece{start: int32(start), end: int32(len(st.text)), pack: true, elem: int32(elem), nelem: int32(len(st.elems) - elem)}
		case 0, 'X', 'J':
			st.decline()
			return piece{}
		case 'L':
			a = st.literal()
		default:
			if st.peek(0) == 'D' && st.peek(1) == 'p' {
				st.decline() // an expansion inside a pack
				return piece{}
			}
			a = st.typ()
		}
		if st.fail {
			return piece{}
		}
		st.args = append(st.args, a)
	}
	return piece{}
}

// literalTypes are the integer types of the literals the fast path prints: the suffix LLVM
// prints after the number, or the cast it prints before it.
var literalTypes = [256]struct{ prefix, suffix string }{
	'i': {}, 'j': {suffix: "u"}, 'l': {suffix: "l"}, 'm': {suffix: "ul"}, 'x': {suffix: "ll"},
	'y': {suffix: "ull"}, 'c': {prefix: "(char)"}, 'a': {prefix: "(signed char)"},
	'h': {prefix: "(unsigned char)"}, 's': {prefix: "(short)"}, 't': {prefix: "(unsigned short)"},
}

// literal reads "L <builtin integer type> [n] <digits> E" and "Lb0E", "Lb1E".
func (st *fastState) literal() piece {
	st.pos++ // 'L'
	c := st.peek(0)
	start := len(st.text)
	if c == 'b' && (st.peek(1) == '0' || st.peek(1) == '1') && st.peek(2) == 'E' {
		if st.peek(1) == '0' {
			st.text = append(st.text, "false"...)
		} else {
			st.text = append(st.text, "true"...)
		}
		st.pos += 3
		return piece{start: int32(start), end: int32(len(st.text))}
	}
	if c == 'N' || isDigit(c) || c == 'S' && st.peek(1) != 't' && st.peek(1) != 'a' && st.peek(1) != 'b' {
		// An enumerator: "(Type)value".
		t := st.typ()
		if st.fail || t.fn != 0 || t.ref != 0 || t.cv != 0 {
			st.decline()
			return piece{}
		}
		start = len(st.text)
		st.text = append(st.text, '(')
		st.copyText(t.start, t.end)
		st.text = append(st.text, ')')
		return st.number(start, "")
	}
	switch c {
	case 'i', 'j', 'l', 'm', 'x', 'y', 'c', 'a', 'h', 's', 't':
	default:
		st.decline()
		return piece{}
	}
	st.pos++
	lt := literalTypes[c]
	st.text = append(st.text, lt.prefix...)
	return st.number(start, lt.suffix)
}

// number reads "[n] <digits> E" and appends the number and suffix to text, a literal's
// that starts at start.
func (st *fastState) number(start int, suffix string) piece {
	if st.peek(0) == 'n' {
		st.text = append(st.text, '-')
		st.pos++
	}
	d := st.pos
	for isDigit(st.peek(0)) {
		st.pos++
	}
	if st.pos == d || st.peek(0) != 'E' {
		st.decline()
		return piece{}
	}
	st.text = append(st.text, st.s[d:st.pos]...)
	st.pos++
	st.text = append(st.text, suffix...)
	return piece{start: int32(start), end: int32(len(st.text))}
}

// streamAbbreviations spell the std:: abbreviations Ss, Si, So and Sd as types.
var streamAbbreviations = [256]string{
	's': "std::string", 'i': "std::istream", 'o': "std::ostream", 'd': "std::iostream",
}

// builtinTypes spells the one-letter builtin types.
var builtinTypes = [256]string{
	'v': "void", 'w': "wchar_t", 'b': "bool", 'c': "char", 'a': "signed char",
	'h': "unsigned char", 's': "short", 't': "unsigned short", 'i': "int", 'j': "unsigned int",
	'l': "long", 'm': "unsigned long", 'x': "long long", 'y': "unsigned long long",
	'n': "__int128", 'o': "unsigned __int128", 'f': "float", 'd': "double",
	'e': "long double", 'g': "__float128", 'z': "...",
}

// typ reads a <type> and returns its text.
func (st *fastState) typ() piece {
	if st.depth++; st.depth > fastMaxDepth {
		st.decline()
		return piece{}
	}
	defer func() { st.depth-- }()
	c := st.peek(0)
	if b := builtinTypes[c]; b != "" {
		st.pos++
		return st.literalText(b)
	}
	var start int
	switch c {
	case 'D':
		var b string
		switch st.peek(1) {
		case 'n':
			b = "std::nullptr_t"
		case 'a':
			b = "auto"
		case 'c':
			b = "decltype(auto)"
		case 's':
			b = "char16_t"
		case 'i':
			b = "char32_t"
		case 'u':
			b = "char8_t"
		case 'p':
			return st.expansion()
		default:
			st.decline()
			return piece{}
		}
		st.pos += 2
		return st.literalText(b)
	case 'r', 'V', 'K':
		// In the ABI's order, each once (the module prints a repeated one twice).
		var q uint8
		if st.peek(0) == 'r' {
			q |= cvRestrict
			st.pos++
		}
		if st.peek(0) == 'V' {
			q |= cvVolatile
			st.pos++
		}
		if st.peek(0) == 'K' {
			q |= cvConst
			st.pos++
		}
		if c := st.peek(0); c == 'r' || c == 'V' || c == 'K' {
			st.decline()
			return piece{}
		}
		if st.peek(0) == 'F' {
			st.decline()
			return piece{}
		}
		t := st.typ()
		if st.fail || t.ref != 0 {
			st.decline()
			return piece{}
		}
		if t.fn != 0 {
			if q != cvConst || t.fn != fnDeclarator || t.cv != 0 {
				st.decline()
				return piece{}
			}
			return st.declarator(t, 'K')
		}
		p := st.qualified(q, t)
		if st.fail {
			return piece{}
		}
		st.addSub(p)
		return p
	case 'F':
		return st.functionType()
	case 'P', 'R', 'O':
		st.pos++
		t := st.typ()
		if st.fail {
			return piece{}
		}
		if t.fn != 0 {
			return st.declarator(t, c)
		}
		p := st.pointerTo(c, t)
		if st.fail {
			return piece{}
		}
		st.addSub(p)
		return p
	case 'T':
		// A template parameter of the encoding: T_ is its first template argument, T<n>_
		// argument n+1.
		st.pos++
		n, ok := st.templateParamIndex()
		if !ok || !st.templated || n >= len(st.targs) {
			st.decline()
			return piece{}
		}
		if st.peek(0) == 'I' || st.targs[n].pack {
			st.decline() // a template template parameter's arguments, a pack
			return piece{}
		}
		a := st.targs[n]
		start = len(st.text)
		st.copyText(a.start, a.end)
		p := a
		p.start, p.end = int32(start), int32(len(st.text))
		st.addSub(p)
		return p
	case 'S':
		if st.peek(1) == 't' {
			nm := st.name(false)
			if st.fail {
				return piece{}
			}
			st.addSub(nm.p)
			return nm.p
		}
		if ab := streamAbbreviations[st.peek(1)]; ab != "" {
			// std::string, std::istream...: as a type, not as a prefix or a template.
			st.pos += 2
			if c := st.peek(0); c == 'I' || c == 'B' {
				st.decline()
				return piece{}
			}
			return st.literalText(ab)
		}
		s, ok := st.substitution()
		if !ok {
			st.decline()
			return piece{}
		}
		if st.peek(0) != 'I' {
			return s
		}
		a := st.templateArgs(false)
		if st.fail {
			return piece{}
		}
		p := st.concat(s, "", a)
		st.addSub(p)
		return p
	case 'N':
		nm := st.nested(false)
		if st.fail || nm.cvref != 0 || nm.ctor {
			st.decline()
			return piece{}
		}
		st.addSub(nm.p)
		return nm.p
	case 'Z':
		nm := st.localName()
		if st.fail || nm.cvref != 0 || st.peek(0) == 'I' {
			st.decline()
			return piece{}
		}
		st.addSub(nm.p)
		return nm.p
	default:
		if !isDigit(c) {
			st.decline()
			return piece{}
		}
		var nm fastParsed
		u, ok := st.unqualified(-1, &nm)
		if !ok {
			return piece{}
		}
		if st.peek(0) == 'I' {
			st.addSub(u)
			a := st.templateArgs(false)
			if st.fail {
				return piece{}
			}
			u = st.concat(u, "", a)
		}
		st.addSub(u)
		return u
	}
}

// qualified returns t with the qualifiers q (cvConst, cvVolatile, cvRestrict): "T const".
func (st *fastState) qualified(q uint8, t piece) piece {
	start := len(st.text)
	st.copyText(t.start, t.end)
	// A qualifier the type has already (a const template argument in a const&
	// parameter) is printed once.
	if t.cv != 0 {
		if q&t.cv != q {
			st.decline() // adding one qualifier to others: the order is the module's
			return piece{}
		}
		q = 0
	}
	cv := q | t.cv
	if q&cvConst != 0 {
		st.text = append(st.text, " const"...)
	}
	if q&cvVolatile != 0 {
		st.text = append(st.text, " volatile"...)
	}
	if q&cvRestrict != 0 {
		st.text = append(st.text, " restrict"...)
	}
	return piece{start: int32(start), end: int32(len(st.text)), cv: cv}
}

// pointerTo returns a pointer (c 'P'), lvalue ('R') or rvalue ('O') reference to t, which is
// no function type, references collapsed: "T*", "T&", "T&&".
func (st *fastState) pointerTo(c byte, t piece) piece {
	start := len(st.text)
	st.copyText(t.start, t.end)
	if st.fail {
		return piece{}
	}
	var ref uint8
	switch {
	case c == 'P':
		if t.ref != 0 {
			st.decline()
			return piece{}
		}
		st.text = append(st.text, '*')
	case t.ref != 0:
		// Reference collapsing: & wins.
		st.collapses++
		ref = t.ref
		if c == 'R' && t.ref == refRValue {
			st.text = st.text[:len(st.text)-2]
			st.text = append(st.text, '&')
			ref = refLValue
		}
	case c == 'R':
		st.text = append(st.text, '&')
		ref = refLValue
	default:
		st.text = append(st.text, "&&"...)
		ref = refRValue
	}
	return piece{start: int32(start), end: int32(len(st.text)), ref: ref}
}

// maxExpansionOps bounds the pointers, references and consts of a pack expansion's pattern
// the fast path reads ("DpOT_", "DpRKT_", "DpPT_").
const maxExpansionOps = 4

// expansion reads "Dp <type>" where the type is a parameter pack of the encoding with
// pointers, references and const around it (the parameters Args&&..., Args const&...,
// Args*...) and returns the pattern applied to each of the pack's elements, joined by ", "
// (empty for an empty pack), as the module expands it. The candidates it adds (the
// parameter, each level of the pattern, the expansion) are marked pack: a substitution that
// repeats one makes the fast path decline, as does any other pattern.
func (st *fastState) expansion() piece {
	st.pos += 2 // "Dp"
	var ops [maxExpansionOps]byte
	n := 0
	for {
		c := st.peek(0)
		if c != 'P' && c != 'R' && c != 'O' && c != 'K' {
			break
		}
		if n == len(ops) || c == 'K' && n > 0 && ops[n-1] == 'K' {
			st.decline()
			return piece{}
		}
		ops[n] = c
		n++
		st.pos++
	}
	if st.peek(0) != 'T' || !st.templated {
		st.decline()
		return piece{}
	}
	st.pos++
	k, ok := st.templateParamIndex()
	if !ok || k >= len(st.targs) || !st.targs[k].pack || st.tagging {
		st.decline()
		return piece{}
	}
	if st.peek(0) == 'I' {
		st.decline() // a template template parameter's arguments
		return piece{}
	}
	pack := st.targs[k]
	for range n + 2 {
		st.addSub(piece{pack: true})
	}
	// Each element with the pattern applied, innermost operator first.
	base := len(st.args)
	for _, e := range st.elems[pack.elem : pack.elem+pack.nelem] {
		if e.fn != 0 || e.pack {
			st.decline()
			return piece{}
		}
		for i := n - 1; i >= 0; i-- {
			if ops[i] == 'K' {
				if e.ref != 0 {
					st.decline()
					return piece{}
				}
				e = st.qualified(cvConst, e)
			} else {
				e = st.pointerTo(ops[i], e)
			}
			if st.fail {
				return piece{}
			}
		}
		st.args = append(st.args, e)
	}
	start := len(st.text)
	for i, e := range st.args[base:] {
		if i > 0 {
			st.text = append(st.text, ", "...)
		}
		st.copyText(e.start, e.end)
	}
	st.args = st.args[:base]
	return piece{start: int32(start), end: int32(len(st.text)), pack: true}
}

// functionType reads "F <return type> <parameter types> E" (no extern "C", no
// ref-qualifier) and returns "R (P)".
func (st *fastState) functionType() piece {
	st.pos++ // 'F'
	if st.peek(0) == 'Y' {
		st.decline()
		return piece{}
	}
	ret := st.typ()
	if st.fail || ret.fn != 0 {
		st.decline()
		return piece{}
	}
	if st.peek(0) == 'E' {
		st.decline() // the parameters are at least "v"
		return piece{}
	}
	base := len(st.args)
	if st.peek(0) == 'v' && st.peek(1) == 'E' {
		st.pos++
	} else {
		for st.peek(0) != 'E' {
			if st.peek(0) == 0 || st.peek(0) == 'R' && st.peek(1) == 'E' || st.peek(0) == 'O' && st.peek(1) == 'E' {
				st.decline()
				return piece{}
			}
			t := st.typ()
			if st.fail {
				return piece{}
			}
			st.args = append(st.args, t)
		}
	}
	st.pos++ // 'E'
	start := len(st.text)
	st.copyText(ret.start, ret.end)
	st.text = append(st.text, ' ')
	mid := len(st.text) - start
	st.parameters(base)
	p := piece{start: int32(start), end: int32(len(st.text)), fn: fnBare, mid: int32(mid)}
	st.addSub(p)
	return p
}

// declarator applies a pointer (P), reference (R, O) or const (K) to a function type or a
// pointer to one: "R (*)(P)", "R (&)(P)", "R (**)(P)", "R (* const)(P)".
func (st *fastState) declarator(t piece, c byte) piece {
	if t.ref != 0 || c == 'O' && t.fn == fnBare {
		st.decline() // references to references, rvalue references to functions
		return piece{}
	}
	var op string
	switch c {
	case 'P':
		op = "*"
	case 'R':
		op = "&"
	case 'O':
		op = "&&"
	case 'K':
		op = " const"
	}
	start := len(st.text)
	mid := t.start + t.mid
	st.copyText(t.start, mid)
	if t.fn == fnBare {
		st.text = append(st.text, '(')
		st.text = append(st.text, op...)
		st.text = append(st.text, ')')
		// The declarator's ')' is the last byte written.
	} else {
		st.text = append(st.text, op...)
		st.text = append(st.text, ')')
		mid++ // past the declarator's ')'
	}
	newMid := len(st.text) - 1 - start
	st.copyText(mid, t.end)
	p := piece{start: int32(start), end: int32(len(st.text)), fn: fnDeclarator, mid: int32(newMid)}
	switch c {
	case 'R':
		p.ref = refLValue
	case 'O':
		p.ref = refRValue
	case 'K':
		p.cv = cvConst
	}
	st.addSub(p)
	return p
}

// templateParamIndex reads the "[<seq-id>] _" of a template parameter after its 'T' and
// returns the argument it names: T_ the first (0), T<n>_ argument n+1.
func (st *fastState) templateParamIndex() (int, bool) {
	n := 0
	if st.peek(0) != '_' {
		v, ok := st.seq()
		if !ok {
			return 0, false
		}
		n = v + 1
	}
	if st.peek(0) != '_' {
		return 0, false
	}
	st.pos++
	return n, true
}

// seq reads a base-36 <seq-id> (upper case), not its '_'.
func (st *fastState) seq() (int, bool) {
	n, start := 0, st.pos
	for {
		c := st.peek(0)
		switch {
		case c >= '0' && c <= '9':
			n = n*36 + int(c-'0')
		case c >= 'A' && c <= 'Z':
			n = n*36 + int(c-'A'+10)
		default:
			return n, st.pos > start
		}
		st.pos++
		if n > 1<<20 {
			return 0, false
		}
	}
}

// literalText appends s to text and returns its range.
func (st *fastState) literalText(s string) piece {
	start := len(st.text)
	st.text = append(st.text, s...)
	return piece{start: int32(start), end: int32(len(st.text))}
}

func isIdentByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_'
}
