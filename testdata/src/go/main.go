// Command corpus is the Go program of profsym's symbolization corpus: generics, closures,
// methods through interfaces, chains of small functions that the compiler inlines, and large
// package initializers (init.go).
package main

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
)

type Number interface {
	~int | ~int32 | ~int64 | ~float64 | ~uint32
}

func Map[T, U any](in []T, f func(T) U) []U {
	out := make([]U, 0, len(in))
	for _, v := range in {
		out = append(out, f(v))
	}
	return out
}

func Filter[T any](in []T, keep func(T) bool) []T {
	var out []T
	for _, v := range in {
		if keep(v) {
			out = append(out, v)
		}
	}
	return out
}

func Reduce[T, A any](in []T, acc A, f func(A, T) A) A {
	for _, v := range in {
		acc = f(acc, v)
	}
	return acc
}

func Sum[T Number](in []T) T {
	var s T
	for _, v := range in {
		s += leafScale(v)
	}
	return s
}

func leafScale[T Number](v T) T { return midScale(v) + 1 }
func midScale[T Number](v T) T  { return topScale(v) * 2 }
func topScale[T Number](v T) T  { return v / 3 }

type Stack[T any] struct{ items []T }

func (s *Stack[T]) Push(v T) { s.items = append(s.items, v) }
func (s *Stack[T]) Pop() (T, bool) {
	var zero T
	if len(s.items) == 0 {
		return zero, false
	}
	v := s.items[len(s.items)-1]
	s.items = s.items[:len(s.items)-1]
	return v, true
}

type Shape interface {
	Area() float64
	Name() string
}

type square struct{ side float64 }
type circle struct{ r float64 }
type triangle struct{ a, b, c float64 }

func (s square) Area() float64   { return s.side * s.side }
func (s square) Name() string    { return "square" }
func (c circle) Area() float64   { return 3.14159 * c.r * c.r }
func (c circle) Name() string    { return "circle" }
func (t triangle) Area() float64 { return heron(t.a, t.b, t.c) }
func (t triangle) Name() string  { return "triangle" }

func heron(a, b, c float64) float64 {
	s := (a + b + c) / 2
	v := s * (s - a) * (s - b) * (s - c)
	if v < 0 {
		return 0
	}
	return sqrtNewton(v)
}

func sqrtNewton(v float64) float64 {
	x := v
	for i := 0; i < 30 && x > 0; i++ {
		x = (x + v/x) / 2
	}
	return x
}

func mix(h, v uint32) uint32       { return rotl(h^v*0x9e3779b1, 13)*5 + 0xe6546b64 }
func rotl(x uint32, r uint) uint32 { return x<<r | x>>(32-r) }
func hashString(s string) uint32 {
	h := uint32(len(s))
	for i := 0; i < len(s); i++ {
		h = mix(h, uint32(s[i]))
	}
	return h
}

func makeShapes(n int, seed uint32) []Shape {
	shapes := make([]Shape, 0, n)
	for i := 0; i < n; i++ {
		seed = mix(seed, uint32(i))
		switch seed % 3 {
		case 0:
			shapes = append(shapes, square{float64(seed % 17)})
		case 1:
			shapes = append(shapes, circle{float64(seed % 13)})
		default:
			shapes = append(shapes, triangle{3, 4, float64(seed%5 + 2)})
		}
	}
	sort.Slice(shapes, func(i, j int) bool { return shapes[i].Area() < shapes[j].Area() })
	return shapes
}

func wordStats(text string) map[string]int {
	counts := map[string]int{}
	for _, w := range strings.Fields(text) {
		counts[strings.ToLower(w)]++
	}
	return counts
}

func counter() func() int {
	n := 0
	return func() int {
		n++
		return n * n
	}
}

func main() {
	n := 1000
	if len(os.Args) > 1 {
		if v, err := strconv.Atoi(os.Args[1]); err == nil {
			n = v
		}
	}
	ints := make([]int, n)
	for i := range ints {
		ints[i] = int(hashString(strconv.Itoa(i)) % 1000)
	}
	evens := Filter(ints, func(v int) bool { return v%2 == 0 })
	floats := Map(evens, func(v int) float64 { return float64(v) / 7 })
	u32 := Map(ints, func(v int) uint32 { return uint32(v) * 3 })
	total := Sum(ints) + int(Sum(floats)) + int(Sum(u32)) + applyAll(n)
	joined := Reduce(ints[:min(len(ints), 20)], "", func(acc string, v int) string { return acc + strconv.Itoa(v) + "," })
	var st Stack[string]
	for _, w := range strings.Split(joined, ",") {
		st.Push(w)
	}
	popped := 0
	for {
		if _, ok := st.Pop(); !ok {
			break
		}
		popped++
	}
	shapes := makeShapes(n, 99)
	area := 0.0
	for _, s := range shapes {
		area += s.Area()
	}
	next := counter()
	for i := 0; i < 10; i++ {
		total += next()
	}
	words := wordStats("the Quick brown fox jumps over the lazy dog THE end")
	fmt.Println(total, popped, len(shapes), int(area), words["the"], shapes[0].Name())
}
