// Package keylock is a mutex per key: holders of one key take turns, other keys are not held
// up, and a key no one holds or waits for takes no memory.
package keylock

import "sync"

// Map is a set of mutexes by key. The zero value is ready to use; a Map must not be copied
// after first use.
type Map struct {
	mu   sync.Mutex
	keys map[string]*entry
}

type entry struct {
	sync.Mutex
	users int // holders and waiters
}

// Lock locks key, waiting while another holds it, and returns its unlock.
func (m *Map) Lock(key string) (unlock func()) {
	m.mu.Lock()
	if m.keys == nil {
		m.keys = map[string]*entry{}
	}
	e := m.keys[key]
	if e == nil {
		e = &entry{}
		m.keys[key] = e
	}
	e.users++
	m.mu.Unlock()
	e.Lock()
	return func() {
		e.Unlock()
		m.mu.Lock()
		if e.users--; e.users == 0 {
			delete(m.keys, key)
		}
		m.mu.Unlock()
	}
}

// held reports how many keys are held or waited for.
func (m *Map) held() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.keys)
}
