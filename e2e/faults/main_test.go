package faults

import (
	"fmt"
	"os"
	"testing"

	"github.com/profsym/profsym/pkg/testsupport"
)

// TestMain removes the symbolizer binary the drills' servers share once every test is done.
func TestMain(m *testing.M) {
	code := m.Run()
	if err := testsupport.RemoveFixtures(); err != nil {
		fmt.Fprintln(os.Stderr, "remove test fixtures:", err)
	}
	os.Exit(code)
}
