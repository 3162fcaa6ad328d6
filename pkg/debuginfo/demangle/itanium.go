package demangle

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/ianlancetaylor/demangle"
)

// itaniumString demangles an Itanium encoding (a clone suffix already cut off) with the
// module's parser and printer, correcting where the module reads or prints the name otherwise
// than LLVM 14 and GNU c++filt do:
//
//   - unresolvedQualifiers: the module counts the template name of an "sr" qualifier as a
//     substitution candidate, which renumbers every later substitution;
//   - referenceTemporary: the module reads the "_" that ends a reference temporary's name
//     (_ZGR <name> [<seq-id>] _) as the start of a discriminator where the name is local or
//     internal, and fails;
//   - parenthesizeFunctionAddress: LLVM prints "&(f(int))" for the address of a function with
//     its parameters and "&(f)" for one without, the module "&f(int)" and "&f";
//   - charArrayInitializers: LLVM and GNU print a char array in a class-type template argument
//     (C++20, tag<fixed{"hello"}>) element by element, "char [6]{(char)104, ...}", the
//     module as a string literal;
//   - newExpressions: LLVM prints a new-expression "new (<placement>)<type>(<init>)", the
//     module "::new(<placement>) <type>((<init>))";
//   - localTemplateParams: a substitution that repeats a template parameter of another
//     encoding (std::call_once's callable in the names of its helpers) means that parameter's
//     argument; the module rebinds it to the template the substitution is read in.
func itaniumString(name string) (string, bool) {
	fixed, ok := unresolvedQualifiers(name)
	if !ok {
		return "", false
	}
	a, err := demangle.ToAST(fixed, opts...)
	if err != nil {
		return referenceTemporary(fixed)
	}
	// The module's printer takes time quadratic in the nesting of types ("PPPP...i": about a
	// second for 8,000 levels); only a long name can nest deep enough for that to matter.
	if len(name) > shortName && astDepth(a, map[demangle.AST]int{}, maxDepth+1) > maxDepth {
		return "", false
	}
	if strings.Contains(name, "adL_Z") {
		parenthesizeFunctionAddress(a)
	}
	if strings.Contains(name, "tlA") {
		charArrayInitializers(a)
	}
	if strings.Contains(name, "nw") || strings.Contains(name, "na") {
		newExpressions(a)
	}
	if a, ok = localTemplateParams(fixed, a); !ok {
		return "", false
	}
	return demangle.ASTToString(a, opts...), true
}

// referenceTemporary demangles "_ZGR <object name> [<seq-id>] _" as LLVM 14 does ("reference
// temporary for <name>") where the module fails: its name parser takes the final "_" for the
// start of a discriminator when the name is local ("Z...E1x_") or internal ("L1x_"). The
// object name is demangled on its own, without the seq-id and the "_".
func referenceTemporary(name string) (string, bool) {
	if !strings.HasPrefix(name, "_ZGR") || !strings.HasSuffix(name, "_") || len(name) < 6 {
		return "", false
	}
	inner := name[4 : len(name)-1]
	for range 2 {
		if a, err := demangle.ToAST("_Z"+inner, opts...); err == nil {
			return "reference temporary for " + demangle.ASTToString(a, opts...), true
		}
		// A seq-id (base 36, upper case) before the "_".
		end := len(inner)
		for end > 0 && (isDigit(inner[end-1]) || inner[end-1] >= 'A' && inner[end-1] <= 'Z') {
			end--
		}
		if end == len(inner) {
			break
		}
		inner = inner[:end]
	}
	return "", false
}

// A name up to shortName bytes is printed whatever its nesting; a longer one only when its
// syntax tree is at most maxDepth deep. Real names nest a few dozen levels.
const (
	shortName = 1 << 10
	maxDepth  = 256
)

// astDepth returns the depth of a's tree up to maxDepth+1, each shared subtree measured once.
// A subtree met where less depth than its own is left is counted as too deep; that happens
// only when the tree is too deep anyway.
func astDepth(a demangle.AST, memo map[demangle.AST]int, left int) int {
	if d, ok := memo[a]; ok {
		return d
	}
	if left == 0 {
		return maxDepth + 1
	}
	d := 0
	a.Traverse(func(n demangle.AST) bool {
		if n == a {
			return true
		}
		if d <= maxDepth {
			d = max(d, astDepth(n, memo, left-1))
		}
		return false
	})
	d = min(d+1, maxDepth+1)
	memo[a] = d
	return d
}

// unresolvedQualifiers rewrites the substitutions of a name with "sr <source-name>
// <template-args>" qualifiers (GCC's enable_if<has_ScalarTraits<T>::value> signatures) so
// that the module resolves them as the ABI numbers them.
//
// The ABI, LLVM and libiberty make no substitution candidate of an <unresolved-qualifier-level>;
// the module adds its source name as one before reading its template arguments, so every later
// substitution S<n>_ that refers to a candidate from there on points one too early. The module
// itself tells where: a name cut at the qualifier and ended with an out-of-range substitution
// fails with the number of candidates at that point (p), and a name cut at a later "S<seq>_"
// fails the same way exactly when that is a substitution (and not, say, the inside of a
// source name). Each such substitution whose index is p or more is moved up by one.
//
// Only the first templated qualifier of an "sr" is corrected (the qualifiers before it, plain
// source names, add nothing); a second one ("sr 1A IiE 1B IiE E ...") and those of "srN" are
// left as the module reads them.
//
// Each probe parses the name up to a point; the probes of one name parse at most
// maxProbeBytes in all, and a name that needs more (no compiler's does) is not demangled.
func unresolvedQualifiers(name string) (string, bool) {
	pr := prober{left: maxProbeBytes}
	from := 0
	for {
		i := nextQualifier(name, from)
		if i < 0 {
			return name, true
		}
		from = i + 2
		p, ok := pr.substitutionsAt(name[:i] + "sr")
		if !ok {
			if pr.left < 0 {
				return "", false
			}
			continue // not an "sr" the parser reaches, or an error before it
		}
		name = pr.shiftSubstitutions(name, i+2, p)
		if pr.left < 0 {
			return "", false
		}
	}
}

// maxProbeBytes bounds the bytes the partial parses of unresolvedQualifiers read for one
// name: GCC's names have one "sr" and a few substitutions after it, a few kilobytes in all.
const maxProbeBytes = 1 << 20

type prober struct{ left int }

// nextQualifier returns the offset of the next "sr" at or after from whose qualifiers
// ("sr" {<source-name>} <source-name> "I") include one with template arguments.
func nextQualifier(name string, from int) int {
	for {
		j := strings.Index(name[from:], "sr")
		if j < 0 {
			return -1
		}
		i := from + j
		from = i + 1
		for k := i + 2; k < len(name) && isDigit(name[k]); {
			n := 0
			for k < len(name) && isDigit(name[k]) && n <= len(name) {
				n = n*10 + int(name[k]-'0')
				k++
			}
			if n == 0 || k+n >= len(name) {
				break
			}
			k += n
			if name[k] == 'I' {
				return i
			}
		}
	}
}

// probeSeq is a substitution index no name reaches (base 36, 1,679,616).
const probeSeq = "SZZZZ_"

var outOfRange = regexp.MustCompile(`^substitution index out of range \(\d+ >= (\d+)\) at (\d+)$`)

// substitutionsAt returns the number of substitution candidates the module has when it reads
// a substitution at the end of prefix, or false when it does not read one there.
func (pr *prober) substitutionsAt(prefix string) (int, bool) {
	if pr.left -= len(prefix); pr.left < 0 {
		return 0, false
	}
	_, err := demangle.ToAST(prefix+probeSeq, opts...)
	if err == nil {
		return 0, false
	}
	m := outOfRange.FindStringSubmatch(err.Error())
	if m == nil {
		return 0, false
	}
	if off, err := strconv.Atoi(m[2]); err != nil || off != len(prefix)+1 {
		return 0, false
	}
	n, err := strconv.Atoi(m[1])
	return n, err == nil
}

// shiftSubstitutions moves every substitution S<seq>_ after from whose index is p or more
// up by one.
func (pr *prober) shiftSubstitutions(name string, from, p int) string {
	var b strings.Builder
	b.Grow(len(name) + 4)
	b.WriteString(name[:from])
	var covered []bool
	for x := from; x < len(name); {
		if name[x] == 'S' {
			j := x + 1
			for j < len(name) && (name[j] >= '0' && name[j] <= '9' || name[j] >= 'A' && name[j] <= 'Z') {
				j++
			}
			if j < len(name) && name[j] == '_' {
				// Only an index of p or more changes: a lower one is written as it is
				// whether the module reads a substitution there or not, so it needs no
				// probe (each probe parses the name up to here).
				if k, ok := seqIndex(name[x+1 : j]); ok && k >= p {
					if covered == nil {
						covered = sourceNameCover(name)
					}
					if readAsSubstitution(name, x, j, covered) {
						b.WriteString(seqString(k + 1))
						x = j + 1
						continue
					}
					if _, ok := pr.substitutionsAt(b.String()); ok {
						b.WriteString(seqString(k + 1))
						x = j + 1
						continue
					}
				}
			}
		}
		b.WriteByte(name[x])
		x++
	}
	return b.String()
}

// readAsSubstitution reports whether "S<seq>_" at name[x:j+1] is certainly read as a
// substitution, so that no probe need parse the name up to it (the probes of a long name with
// a few dozen substitutions after its "sr" took milliseconds): when no source name can hold
// it (covered, sourceNameCover's) and the byte before it cannot make the 'S' the second
// letter of an operator's code (aS =, lS <<=, rS >>=) or of a vendor type (DS)
// (notOperatorLetter). Anything else is probed.
func readAsSubstitution(name string, x, j int, covered []bool) bool {
	if x < 3 {
		return false
	}
	for k := x - 1; k <= j; k++ {
		if covered[k] {
			return false
		}
	}
	return notOperatorLetter(name, x)
}

// seqIndex decodes the <seq-id> of S<seq-id>_: empty is 0, base-36 n is n+1.
func seqIndex(s string) (int, bool) {
	if s == "" {
		return 0, true
	}
	if len(s) > 6 {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 36, 64)
	return int(n) + 1, err == nil
}

// seqString encodes substitution index k as S<seq-id>_.
func seqString(k int) string {
	if k == 0 {
		return "S_"
	}
	return "S" + strings.ToUpper(strconv.FormatInt(int64(k-1), 36)) + "_"
}

// parenthesizeFunctionAddress makes the module print the address of a function as LLVM 14
// does, "&(f(int))" and, for an external name without parameters (an extern "C" function),
// "&(f)": LLVM parenthesizes the operand of a prefix operator, and GNU c++filt does too where
// the operand is a function with its parameters, which is where the two agree. The module
// prints "&f(int)" and "&f".
func parenthesizeFunctionAddress(a demangle.AST) {
	walk(a, func(n demangle.AST) {
		u, ok := n.(*demangle.Unary)
		if !ok || u.Suffix {
			return
		}
		if op, ok := u.Op.(*demangle.Operator); !ok || op.Name != "&" {
			return
		}
		switch t := u.Expr.(type) {
		case *demangle.Typed:
			switch t.Type.(type) {
			case *demangle.FunctionType, *demangle.MethodWithQualifiers:
				u.Expr = &demangle.Name{Name: "(" + demangle.ASTToString(t, opts...) + ")"}
			}
		case *demangle.Name:
			// An external name without parameters (an extern "C" function): LLVM
			// parenthesizes it too, "&(uv_tcp_getpeername)".
			u.Expr = &demangle.Name{Name: "(" + t.Name + ")"}
		}
	})
}

// walk calls fn on every node of a once: substitutions share subtrees, and a hostile name
// can repeat one exponentially often.
func walk(a demangle.AST, fn func(demangle.AST)) {
	seen := map[demangle.AST]bool{}
	a.Traverse(func(n demangle.AST) bool {
		if seen[n] {
			return false
		}
		seen[n] = true
		fn(n)
		return true
	})
}

// charArrayInitializers makes the module print a char array's initializer in a template
// argument as LLVM 14 and GNU c++filt do, element by element with its type
// ("probe::fixed<6ul>{char [6]{(char)104, (char)101, (char)108, (char)108, (char)111}}", C++20's
// class-type template arguments made from a string literal), where the module prints a
// string literal ({"hello"}). The module prints a char array's initializer list as a string
// whenever it can; with its type replaced by a name that reads the same, it prints the list.
func charArrayInitializers(a demangle.AST) {
	walk(a, func(n demangle.AST) {
		il, ok := n.(*demangle.InitializerList)
		if !ok || il.Type == nil {
			return
		}
		if array, ok := il.Type.(*demangle.ArrayType); ok {
			if b, ok := array.Element.(*demangle.BuiltinType); ok && b.Name == "char" {
				il.Type = &demangle.Name{Name: demangle.ASTToString(array, opts...)}
			}
		}
	})
}

// newExpressions makes the module print a new-expression (in a decltype, C++20's
// std::construct_at) as LLVM 14 does: "new ((void*)(0))int(declval<int const&>())". The module
// prints "::new((void*)(0)) int((declval<int const&>()))", GNU c++filt
// "::new ((void*)(0)) int((declval<int const&>)())": the references differ, and we print what
// llvm-symbolizer prints (decisions.tsv records the names).
func newExpressions(a demangle.AST) {
	walk(a, func(n demangle.AST) {
		switch n := n.(type) {
		case *demangle.Unary, *demangle.Binary, *demangle.Trinary, *demangle.Decltype,
			*demangle.ExprList, *demangle.PackExpansion:
			replaceNew(n)
		}
	})
}

// replaceNew replaces the new-expressions among the children of n by their LLVM spelling.
func replaceNew(n demangle.AST) {
	fix := func(p *demangle.AST) {
		e := *p
		// LLVM 14 drops the global scope of "::new" (gs nw).
		if u, ok := e.(*demangle.Unary); ok {
			if op, ok := u.Op.(*demangle.Operator); ok && op.Name == "::" {
				e = u.Expr
			}
		}
		nw, ok := e.(*demangle.New)
		if !ok {
			return
		}
		var b strings.Builder
		op, _ := nw.Op.(*demangle.Operator)
		if op == nil {
			return
		}
		b.WriteString(strings.TrimPrefix(op.Name, "::"))
		b.WriteByte(' ')
		if nw.Place != nil {
			b.WriteByte('(')
			b.WriteString(exprListString(nw.Place))
			b.WriteByte(')')
		}
		b.WriteString(demangle.ASTToString(nw.Type, opts...))
		if nw.Init != nil {
			b.WriteByte('(')
			b.WriteString(exprListString(nw.Init))
			b.WriteByte(')')
		}
		*p = &demangle.Name{Name: b.String()}
	}
	switch n := n.(type) {
	case *demangle.Unary:
		fix(&n.Expr)
	case *demangle.Binary:
		fix(&n.Left)
		fix(&n.Right)
	case *demangle.Trinary:
		fix(&n.First)
		fix(&n.Second)
		fix(&n.Third)
	case *demangle.Decltype:
		fix(&n.Expr)
	case *demangle.ExprList:
		for i := range n.Exprs {
			fix(&n.Exprs[i])
		}
	case *demangle.PackExpansion:
		fix(&n.Base)
	}
}

// exprListString prints an expression list element by element, as LLVM does, each without
// the parentheses the module puts around a list's elements.
func exprListString(a demangle.AST) string {
	el, ok := a.(*demangle.ExprList)
	if !ok {
		return demangle.ASTToString(a, opts...)
	}
	parts := make([]string, len(el.Exprs))
	for i, e := range el.Exprs {
		if pe, ok := e.(*demangle.PackExpansion); ok {
			e = pe.Base
		}
		parts[i] = demangle.ASTToString(e, opts...)
	}
	return strings.Join(parts, ", ")
}
