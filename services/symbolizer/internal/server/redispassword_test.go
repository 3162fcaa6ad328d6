package server

import (
	"os"
	"path/filepath"
	"testing"
)

// The password file is how a Redis password stays off the command line: it must reach every
// URL form go-redis reads, keep an ACL user name, and replace a password already in the URL.
func TestWithRedisPassword(t *testing.T) {
	file := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(file, []byte("s3cr/t:@\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ in, want string }{
		{"redis://redis:6379/0", "redis://:s3cr%2Ft%3A%40@redis:6379/0"},
		{"rediss://cache:old@redis.example:6380/1", "rediss://cache:s3cr%2Ft%3A%40@redis.example:6380/1"},
		{"redis+cluster://a:7000?addr=b:7001", "redis+cluster://:s3cr%2Ft%3A%40@a:7000?addr=b:7001"},
	} {
		got, err := withRedisPassword(tc.in, file)
		if err != nil {
			t.Fatalf("%s: %v", tc.in, err)
		}
		if got != tc.want {
			t.Errorf("%s: got %s, want %s", tc.in, got, tc.want)
		}
	}
	if got, err := withRedisPassword("redis://redis:6379/0", ""); err != nil || got != "redis://redis:6379/0" {
		t.Errorf("no file: got %q, %v; want the URL unchanged", got, err)
	}
	if _, err := withRedisPassword("redis://redis:6379/0", filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("a missing password file must be an error, not a Redis without a password")
	}
}
