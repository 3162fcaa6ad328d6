package unwind

import (
	"reflect"
	"testing"
)

func TestRowAllocator(t *testing.T) {
	a := newRowAllocator(100)
	s1, ok1 := a.alloc(30)
	s2, ok2 := a.alloc(30)
	s3, ok3 := a.alloc(30)
	if !ok1 || !ok2 || !ok3 || s1 != 0 || s2 != 30 || s3 != 60 {
		t.Fatalf("allocs = %d %v, %d %v, %d %v", s1, ok1, s2, ok2, s3, ok3)
	}
	if _, ok := a.alloc(11); ok {
		t.Fatal("allocated 11 rows with 10 free")
	}
	a.release(s2, 30)
	if got := a.largest(); got != 30 {
		t.Fatalf("largest after freeing the middle = %d, want 30", got)
	}
	// Freeing the first run merges it with the middle one.
	a.release(s1, 30)
	if want := []span{{0, 60}, {90, 10}}; !reflect.DeepEqual(a.free, want) {
		t.Fatalf("free list = %v, want %v", a.free, want)
	}
	a.release(s3, 30)
	if want := []span{{0, 100}}; !reflect.DeepEqual(a.free, want) || a.used != 0 {
		t.Fatalf("free list = %v used %d, want %v and 0", a.free, a.used, want)
	}
	if _, ok := a.alloc(0); ok {
		t.Fatal("a zero-row allocation succeeded")
	}
}
