//go:build linux

package guest

import (
	"context"
	"testing"
	"time"
)

func TestAcquireSlot(t *testing.T) {
	// Not the machine's slots: a guest another test runs meanwhile would hold them.
	slotDir = t.TempDir()
	var releases []func()
	for range MaxGuests {
		release, err := acquireSlot(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		releases = append(releases, release)
	}
	// Every slot is taken: the next waits until its context ends.
	ctx, cancel := context.WithTimeout(t.Context(), 600*time.Millisecond)
	defer cancel()
	if release, err := acquireSlot(ctx); err == nil {
		release()
		t.Fatal("a slot beyond MaxGuests")
	}
	releases[0]()
	release, err := acquireSlot(t.Context())
	if err != nil {
		t.Fatalf("a freed slot: %v", err)
	}
	release()
	for _, r := range releases[1:] {
		r()
	}
}
