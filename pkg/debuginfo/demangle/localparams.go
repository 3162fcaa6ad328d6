package demangle

import (
	"reflect"
	"strconv"
	"strings"

	"github.com/ianlancetaylor/demangle"
)

// localTemplateParams binds the template parameters of a name with several encodings as
// LLVM and libiberty do.
//
// The ABI reads a template parameter T<k>_ as argument k of the template whose encoding's
// signature it is read in, and numbers it as a substitution candidate; a later S<n>_ that
// repeats the candidate repeats that argument, even where it is read inside another template's
// encoding. GCC makes such names with local names in template arguments, where it reuses a
// candidate of the inner function's signature for an equal-looking parameter of the outer one:
//
//	std::__addressof<call_once<F>(once_flag&, F&&)::'lambda'()>(S8_&)
//
// with S8_ the T_ of call_once's signature: the parameter prints as F. The module rebinds
// every template parameter of a substituted candidate to the template it is read in (the
// outer lambda here), and binds the parameters of an external name's signature in an
// expression ("L_Z...E" in a decltype) to the enclosing template's.
//
// The module's tree does not tell which of its nodes stand for a template parameter, so the
// name is parsed a second time with each template parameter read as a type replaced by a class
// name of its own (a marker, one candidate as the parameter is). The two trees are walked side
// by side: the first position of a marker is the parameter as read, bound to the template
// whose signature holds it; every position gets that template's argument. A name whose trees
// do not line up is left as the module reads it, and so are parameter packs.
func localTemplateParams(name string, a demangle.AST) (demangle.AST, bool) {
	// A parameter can only be rebound where a name has two encodings: a local name ('Z') or
	// an external name in an expression ("L_Z") after the leading "_Z".
	if len(name) < 3 || strings.IndexByte(name[2:], 'Z') < 0 || strings.IndexByte(name, 'T') < 0 {
		return a, true
	}
	if templateSignatures(a) < 2 {
		return a, true // one template: every parameter is bound to it
	}
	pr := prober{left: maxMarkerProbeBytes}
	var b strings.Builder
	last, markers := 0, 0
	var indexes []int // the parameter number of each marker
	var covered []bool
	for i := 2; i < len(name); i++ {
		if name[i] != 'T' {
			continue
		}
		j := i + 1
		for j < len(name) && (isDigit(name[j]) || name[j] >= 'A' && name[j] <= 'Z') {
			j++
		}
		if j >= len(name) || name[j] != '_' {
			continue
		}
		if covered == nil {
			covered = sourceNameCover(name)
		}
		if readAsType(name, i, j, covered) {
			// No probe needed.
		} else if _, ok := pr.substitutionsAt(name[:i]); !ok {
			if pr.left < 0 {
				return a, true // more parameters than real names have: left as read
			}
			continue // not read as a type here (inside a source name, an expression)
		}
		marker := markerPrefix + strconv.Itoa(markers)
		markers++
		k, ok := seqIndex(name[i+1 : j])
		if !ok {
			return a, true
		}
		indexes = append(indexes, k)
		b.WriteString(name[last:i])
		b.WriteString(strconv.Itoa(len(marker)))
		b.WriteString(marker)
		last = j + 1
		i = j
	}
	if markers == 0 {
		return a, true
	}
	b.WriteString(name[last:])
	m, err := demangle.ToAST(b.String(), opts...)
	if err != nil {
		return a, true
	}
	w := lockstep{first: make([]*occurrence, markers), indexes: indexes, poisoned: make([]bool, markers), left: maxNodes}
	root := &demangle.Typed{Name: a, Type: &demangle.Name{}} // a parent for the root
	if !w.walk(a, m, root, 0, nil, nil) {
		return a, true
	}
	// Every repetition read under another template than its parameter gets the argument
	// the parameter was read as.
	type change struct {
		field reflect.Value
		to    demangle.AST
	}
	var changes []change
	fields := map[demangle.AST][]reflect.Value{} // each parent's children, listed once
	for _, o := range append(w.first, w.later...) {
		if o == nil {
			continue
		}
		f := w.first[o.id]
		if w.poisoned[o.id] || f.tmpl == nil || f.index >= len(f.tmpl.Args) {
			continue
		}
		if o == f {
			// The parameter as read: the module binds it to another template where the
			// encoding is an external name in an expression.
			if o.ref != nil || o.node == f.tmpl.Args[f.index] {
				continue
			}
		} else if f.tmpl == o.tmpl {
			continue
		}
		fs, ok := fields[o.parent]
		if !ok {
			fs = childFields(o.parent)
			fields[o.parent] = fs
		}
		if o.child >= len(fs) || !fs[o.child].CanSet() || fs[o.child].Interface() != o.node {
			return a, true
		}
		changes = append(changes, change{fs[o.child], o.collapse(f.tmpl.Args[f.index])})
	}
	for _, c := range changes {
		c.field.Set(reflect.ValueOf(&c.to).Elem())
	}
	return root.Name, true
}

// readAsType reports whether the template parameter name[i:j+1] ("T<seq>_") is certainly
// read as a type, so that substitutionsAt need not parse the name up to it (each probe
// parses the prefix; a long name with a few dozen parameters spent milliseconds there). It
// is when the byte before it introduces a type: a pointer, reference or qualifier (P, R, O,
// K, V, r), a template argument or pack element (I, J), or a pack expansion of a type (Dp),
// and none of those bytes can be inside a source name (covered) nor be the second letter
// of an operator's code in an expression (oR |=, eO ^=, sP sizeof..., mI -=, dV /=, rM
// %=...). Anything else is probed as before.
func readAsType(name string, i, j int, covered []bool) bool {
	if i < 3 {
		return false
	}
	for k := i - 2; k <= j; k++ {
		if covered[k] {
			return false
		}
	}
	prev, before := name[i-1], name[i-2]
	switch prev {
	case 'K', 'J':
		return true
	case 'P':
		return before != 's'
	case 'R':
		return before != 'o'
	case 'O':
		return before != 'e'
	case 'I':
		return before != 'm'
	case 'V':
		return before != 'd'
	case 'r':
		return false
	case 'p':
		return before == 'D' && (i < 4 || !covered[i-3])
	}
	return false
}

// sourceNameCover marks every byte of name that some source name could hold: for each
// position of a digit, the bytes after its run of digits, as many as the digits from it
// say. It over-approximates (the digits of a literal, an array bound or a discriminator are
// taken for a length too), which costs a probe, never a wrong answer. The digits of a
// substitution or template parameter ("S12_", "T0_": an 'S' or 'T' no source name can hold,
// not the second letter of an operator's code, the digits ended by '_') are no length: taken
// for one, the 12 of S12_ would cover the next 12 bytes, and every substitution there would
// be probed.
func sourceNameCover(name string) []bool {
	covered := make([]bool, len(name)+1)
	end := 0 // the end of the marking so far
	for k := 0; k < len(name); {
		if !isDigit(name[k]) {
			k++
			continue
		}
		run := k
		for run < len(name) && isDigit(name[run]) {
			run++
		}
		if k >= 3 && (name[k-1] == 'S' || name[k-1] == 'T') && !covered[k-1] && notOperatorLetter(name, k-1) {
			// A base-36 <seq-id>: digits and upper-case letters up to the '_'.
			e := run
			for e < len(name) && (isDigit(name[e]) || name[e] >= 'A' && name[e] <= 'Z') {
				e++
			}
			if e < len(name) && name[e] == '_' {
				k = e
				continue
			}
		}
		for d := k; d < run; d++ {
			n := 0
			for e := d; e < run && n <= len(name); e++ {
				n = n*10 + int(name[e]-'0')
			}
			to := min(run+n, len(name))
			for x := max(run, end); x < to; x++ {
				covered[x] = true
			}
			end = max(end, to)
		}
		k = run
	}
	return covered
}

// notOperatorLetter reports whether name[i] (an 'S' or a 'T') cannot be the second letter of
// an operator's code or a vendor type: aS (=), lS (<<=), rS (>>=), DS, DT (decltype) and the
// like. "Ul" before it is a closure's start, not an operator.
func notOperatorLetter(name string, i int) bool {
	switch name[i-1] {
	case 'a', 'r', 'D':
		return false
	case 'l':
		return i >= 2 && name[i-2] == 'U'
	}
	return true
}

// templateSignatures counts the encodings of a template function in a, up to 2: the
// templates a parameter can be bound to.
func templateSignatures(a demangle.AST) int {
	n, left := 0, maxNodes
	a.Traverse(func(x demangle.AST) bool {
		if n >= 2 || left <= 0 {
			return false
		}
		left--
		if t, ok := x.(*demangle.Typed); ok && findTemplate(t.Name) != nil {
			n++
		}
		return true
	})
	if left <= 0 {
		return 2 // too large to tell: look closer
	}
	return n
}

// An occurrence is one position of a marker in the marked tree, and what stands there in the
// module's tree.
type occurrence struct {
	id, index int
	tmpl      *demangle.Template // the template whose signature holds the position
	parent    demangle.AST       // the module's node holding node, its child number child
	child     int
	node      demangle.AST
	ref       demangle.AST // the references over the parameter, in the marked tree
}

// collapse returns arg as it stands at o: under o's references, collapsed as LLVM prints
// them (an lvalue reference anywhere makes an lvalue reference).
func (o *occurrence) collapse(arg demangle.AST) demangle.AST {
	if o.ref == nil {
		return arg
	}
	lvalue := false
	for r := o.ref; ; {
		switch t := r.(type) {
		case *demangle.ReferenceType:
			lvalue = true
			r = t.Base
			continue
		case *demangle.RvalueReferenceType:
			r = t.Base
			continue
		}
		break
	}
	switch b := arg.(type) {
	case *demangle.ReferenceType:
		return b
	case *demangle.RvalueReferenceType:
		if lvalue {
			return &demangle.ReferenceType{Base: b.Base}
		}
		return b
	}
	if lvalue {
		return &demangle.ReferenceType{Base: arg}
	}
	return &demangle.RvalueReferenceType{Base: arg}
}

type lockstep struct {
	indexes  []int
	first    []*occurrence
	poisoned []bool
	later    []*occurrence
	left     int
	seen     map[walkKey]bool
}

type walkKey struct {
	x, y        demangle.AST
	tmpl, named *demangle.Template
}

// walk goes down the module's tree x and the marked tree y side by side; tmpl is the template
// whose signature the position is in (as the module pushes it in an encoding).
//
// named is the template whose name holds the position, if any: a conversion operator's type
// ("cv T_") names the parameters of the operator's own template, which follows it.
func (w *lockstep) walk(x, y, parent demangle.AST, child int, tmpl, named *demangle.Template) bool {
	if w.left--; w.left < 0 {
		return false
	}
	if id, ok := markerID(y); ok {
		return w.record(id, x, nil, parent, child, tmpl)
	}
	if id, ok := refToMarker(y); ok {
		// The parameter under references, which the module may have collapsed with the
		// argument's own: the position is the outermost reference.
		return w.record(id, x, y, parent, child, tmpl)
	}

	if reflect.TypeOf(x) != reflect.TypeOf(y) {
		if _, ok := y.(*demangle.PackExpansion); ok {
			// A parameter pack: the module expands it, the marker cannot be. Its
			// parameters are left as the module reads them.
			y.Traverse(func(n demangle.AST) bool {
				if id, ok := markerID(n); ok && id < len(w.first) {
					w.poisoned[id] = true
				}
				return true
			})
			return true
		}
		return false
	}
	cx, cy := children(x), children(y)
	if len(cx) != len(cy) {
		return false
	}
	if len(cx) == 0 {
		return true
	}
	// Substitutions share subtrees: a pair of subtrees walked already in the same
	// templates records nothing new inside (its occurrences have the same parents, nodes
	// and templates, and come after the first ones), so it is walked once. A long name
	// repeats a few subtrees hundreds of times.
	k := walkKey{x, y, tmpl, named}
	if w.seen == nil {
		w.seen = map[walkKey]bool{}
	}
	if w.seen[k] {
		return true
	}
	w.seen[k] = true
	var sig *demangle.Template
	switch t := x.(type) {
	case *demangle.Typed:
		sig = findTemplate(t.Name)
	case *demangle.Cast:
		if named != nil {
			tmpl = named
		}
	}
	for i := range cx {
		in, inName := tmpl, named
		if sig != nil && i == 1 { // Typed's Type: the signature
			in, inName = sig, nil
		}
		if t, ok := x.(*demangle.Template); ok {
			if i == 0 {
				inName = t
			} else {
				inName = nil
			}
		}
		if !w.walk(cx[i], cy[i], x, i, in, inName) {
			return false
		}
	}
	return true
}

func (w *lockstep) record(id int, x, ref, parent demangle.AST, child int, tmpl *demangle.Template) bool {
	if id >= len(w.first) {
		return false
	}
	o := &occurrence{id: id, tmpl: tmpl, parent: parent, child: child, node: x, ref: ref}
	if w.first[id] == nil {
		o.index = w.indexes[id]
		w.first[id] = o
		return true
	}
	w.later = append(w.later, o)
	return true
}

// refToMarker returns the marker a is references to, if it is.
func refToMarker(a demangle.AST) (int, bool) {
	seen := false
	for {
		switch r := a.(type) {
		case *demangle.ReferenceType:
			a, seen = r.Base, true
			continue
		case *demangle.RvalueReferenceType:
			a, seen = r.Base, true
			continue
		}
		if !seen {
			return 0, false
		}
		return markerID(a)
	}
}

// findTemplate is the template whose parameters an encoding named a binds, as the module
// finds it.
func findTemplate(a demangle.AST) *demangle.Template {
	switch a := a.(type) {
	case *demangle.Template:
		return a
	case *demangle.Qualified:
		if a.LocalName {
			return findTemplate(a.Name)
		}
		if _, ok := a.Name.(*demangle.Constructor); ok {
			return findTemplate(a.Name)
		}
	case *demangle.MethodWithQualifiers:
		return findTemplate(a.Method)
	case *demangle.Constructor:
		if a.Base != nil {
			return findTemplate(a.Base)
		}
	case *demangle.Constraint:
		return findTemplate(a.Name)
	}
	return nil
}

// children lists a node's children in the order Traverse visits them.
func children(a demangle.AST) []demangle.AST {
	var out []demangle.AST
	a.Traverse(func(n demangle.AST) bool {
		if n == a && out == nil {
			out = []demangle.AST{}
			return true
		}
		out = append(out, n)
		return false
	})
	return out
}

var astType = reflect.TypeOf((*demangle.AST)(nil)).Elem()

// childFields returns the settable places of a node's children, in the order Traverse visits
// them: its AST and []AST fields, nil ones left out.
func childFields(parent demangle.AST) []reflect.Value {
	v := reflect.ValueOf(parent)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return nil
	}
	v = v.Elem()
	var out []reflect.Value
	for i := 0; i < v.NumField(); i++ {
		f := v.Field(i)
		switch {
		case f.Type() == astType:
			if !f.IsNil() {
				out = append(out, f)
			}
		case f.Kind() == reflect.Slice && f.Type().Elem() == astType:
			for j := 0; j < f.Len(); j++ {
				if !f.Index(j).IsNil() {
					out = append(out, f.Index(j))
				}
			}
		}
	}
	return out
}

// maxMarkerProbeBytes bounds the bytes the probes for template parameters parse for one
// name: a real name has a few parameters within its first few kilobytes.
const maxMarkerProbeBytes = 1 << 17

// markerPrefix starts the class names that stand for template parameters in the second
// parse; no compiler emits an identifier with it.
const markerPrefix = "__profsym_T"

func markerID(n demangle.AST) (int, bool) {
	nm, ok := n.(*demangle.Name)
	if !ok || !strings.HasPrefix(nm.Name, markerPrefix) {
		return 0, false
	}
	id, err := strconv.Atoi(nm.Name[len(markerPrefix):])
	return id, err == nil
}

// maxNodes bounds the positions the side-by-side walk visits: substitutions share subtrees,
// and a hostile name repeats one exponentially often. Real names have a few hundred.
const maxNodes = 1 << 14
