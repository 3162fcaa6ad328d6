package flamegraph

import (
	"cmp"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
)

// Frame is one frame of a stack.
type Frame struct {
	// Function is the function's name; empty when the frame is not symbolized.
	Function string
	File     string
	Line     int64
	// Inlined is true for a frame the compiler inlined into the frame after it (toward the
	// root): the same machine address, another source function.
	Inlined bool
	// Kind is the frame's runtime (profile.frame.type: native, kernel, go, ...), empty when
	// the producer did not say.
	Kind string
	// Module and Address name an unsymbolized frame: the mapping's file and the address.
	Module  string
	Address uint64
}

// Name is the function name, or the module and address of an unsymbolized frame.
func (f Frame) Name() string {
	switch {
	case f.Function != "":
		return f.Function
	case f.Module != "":
		return fmt.Sprintf("%s+%#x", filepath.Base(f.Module), f.Address)
	default:
		return fmt.Sprintf("%#x", f.Address)
	}
}

// Stack is one sample: frames leaf first (inline frames expanded, innermost first, as OTLP and
// pprof list a location's lines) and its value.
type Stack struct {
	Frames []Frame
	Value  int64
}

// nodeKey is what merges frames into one node: the function, its file and kind, and whether
// it was inlined there.
type nodeKey struct {
	name, file, kind string
	inlined          bool
	unsymbolized     bool
}

type node struct {
	key      nodeKey
	value    int64
	lines    map[int64]int64
	children map[nodeKey]*node
}

// Tree is the merged call tree of a set of stacks, root first.
type Tree struct {
	root node
}

// NewTree returns an empty tree.
func NewTree() *Tree { return &Tree{root: node{key: nodeKey{name: "all"}}} }

// Add merges one stack (leaf first) into the tree. A stack with a value of zero or less, or
// without frames, adds nothing.
func (t *Tree) Add(s Stack) {
	if s.Value <= 0 || len(s.Frames) == 0 {
		return
	}
	n := &t.root
	n.value += s.Value
	for i := len(s.Frames) - 1; i >= 0; i-- {
		f := s.Frames[i]
		k := nodeKey{name: f.Name(), file: f.File, kind: f.Kind, inlined: f.Inlined, unsymbolized: f.Function == ""}
		if n.children == nil {
			n.children = map[nodeKey]*node{}
		}
		c := n.children[k]
		if c == nil {
			c = &node{key: k}
			n.children[k] = c
		}
		c.value += s.Value
		if f.Line > 0 {
			if c.lines == nil {
				c.lines = map[int64]int64{}
			}
			c.lines[f.Line] += s.Value
		}
		n = c
	}
}

// Total is the sum of the values added.
func (t *Tree) Total() int64 { return t.root.value }

// maxLines is how many lines of a node the page lists, the busiest first.
const maxLines = 5

// jsonTree is the page's data: strings once in a table, nodes by index into it.
type jsonTree struct {
	Title   string     `json:"title"`
	Unit    string     `json:"unit"`
	Total   int64      `json:"total"`
	Strings []string   `json:"strings"`
	Root    jsonNode   `json:"root"`
	Kinds   []jsonKind `json:"kinds"`
}

type jsonKind struct {
	Kind  string `json:"kind"`
	Value int64  `json:"value"`
}

type jsonNode struct {
	Name  int        `json:"n"`
	File  int        `json:"f,omitempty"` // 0: the empty string
	Kind  int        `json:"k,omitempty"`
	Lines [][2]int64 `json:"l,omitempty"` // [line, value], busiest first
	// LineCount is how many distinct lines the node has, when more than Lines lists.
	LineCount int        `json:"lc,omitempty"`
	Inlined   bool       `json:"i,omitempty"`
	Unsym     bool       `json:"u,omitempty"`
	Value     int64      `json:"v"`
	Children  []jsonNode `json:"c,omitempty"`
}

type stringTable struct {
	list []string
	idx  map[string]int
}

func (s *stringTable) id(v string) int {
	if i, ok := s.idx[v]; ok {
		return i
	}
	s.idx[v] = len(s.list)
	s.list = append(s.list, v)
	return len(s.list) - 1
}

// data lays the tree out for the page. Nodes below minValue are left out (their time stays in
// their parent's value, shown as the parent's own time): they would be narrower than a pixel.
func (t *Tree) data(title, unit string, minValue int64) jsonTree {
	st := &stringTable{idx: map[string]int{}}
	st.id("")
	kinds := map[string]int64{}
	var conv func(n *node) jsonNode
	conv = func(n *node) jsonNode {
		j := jsonNode{Name: st.id(n.key.name), File: st.id(n.key.file), Kind: st.id(n.key.kind),
			Inlined: n.key.inlined, Unsym: n.key.unsymbolized, Value: n.value}
		if len(n.lines) > 0 {
			for l, v := range n.lines {
				j.Lines = append(j.Lines, [2]int64{l, v})
			}
			slices.SortFunc(j.Lines, func(a, b [2]int64) int {
				return cmp.Or(cmp.Compare(b[1], a[1]), cmp.Compare(a[0], b[0]))
			})
			if len(j.Lines) > maxLines {
				j.LineCount = len(j.Lines)
				j.Lines = j.Lines[:maxLines]
			}
		}
		kids := make([]*node, 0, len(n.children))
		for _, c := range n.children {
			if c.value >= minValue {
				kids = append(kids, c)
			}
		}
		// Alphabetical, as flame graphs are: the same function sits in the same place in
		// every graph of the same program.
		slices.SortFunc(kids, func(a, b *node) int {
			return cmp.Or(cmp.Compare(a.key.name, b.key.name), cmp.Compare(a.key.file, b.key.file),
				cmp.Compare(a.key.kind, b.key.kind), boolCmp(a.key.inlined, b.key.inlined))
		})
		for _, c := range kids {
			j.Children = append(j.Children, conv(c))
		}
		return j
	}
	root := conv(&t.root)
	// The legend lists the frame kinds present, each with the time its frames hold at the top
	// of the stack (their own time).
	var leafKinds func(n *node)
	leafKinds = func(n *node) {
		var below int64
		for _, c := range n.children {
			below += c.value
			leafKinds(c)
		}
		if n != &t.root {
			kinds[n.key.kind] += n.value - below
		}
	}
	leafKinds(&t.root)
	out := jsonTree{Title: title, Unit: unit, Total: t.root.value, Strings: st.list, Root: root}
	for k, v := range kinds {
		out.Kinds = append(out.Kinds, jsonKind{Kind: k, Value: v})
	}
	slices.SortFunc(out.Kinds, func(a, b jsonKind) int {
		return cmp.Or(cmp.Compare(b.Value, a.Value), cmp.Compare(a.Kind, b.Kind))
	})
	return out
}

func boolCmp(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	default:
		return 1
	}
}

// marshal is the data as JSON safe inside a <script> element: encoding/json escapes <, > and &,
// so no "</script>" can end the element early.
func (j jsonTree) marshal() ([]byte, error) {
	b, err := json.Marshal(j)
	if err != nil {
		return nil, fmt.Errorf("encode the call tree: %w", err)
	}
	return b, nil
}
