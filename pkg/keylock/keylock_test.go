package keylock

import (
	"sync"
	"testing"
	"time"
)

// TestMap: holders of one key take turns, another key is not held up, and a key no
// one holds is forgotten.
func TestMap(t *testing.T) {
	var k Map
	var (
		mu           sync.Mutex
		inside, most [2]int
	)
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() {
			key := i % 2
			unlock := k.Lock([]string{"a", "b"}[key])
			mu.Lock()
			inside[key]++
			most[key] = max(most[key], inside[key])
			mu.Unlock()
			time.Sleep(time.Millisecond)
			mu.Lock()
			inside[key]--
			mu.Unlock()
			unlock()
		})
	}
	wg.Wait()
	for key := range 2 {
		if most[key] != 1 {
			t.Errorf("key %d held by %d at once, want 1", key, most[key])
		}
	}
	// Another key while one is held: not held up.
	unlock := k.Lock("a")
	done := make(chan struct{})
	go func() { k.Lock("b")(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("key b waited for key a")
	}
	unlock()
	if n := k.held(); n != 0 {
		t.Errorf("%d keys remembered after every holder left", n)
	}
}
