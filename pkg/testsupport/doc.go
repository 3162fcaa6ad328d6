// Package testsupport starts real servers (Redis, MinIO, debuginfod, and
// kube-apiserver on etcd) on free loopback ports for integration tests and
// builds small ELF fixtures from C source.
//
// Every server is a child process of the test binary: it gets its own
// t.TempDir(), its output goes to a log file whose last lines are printed
// when the test fails, and it is stopped by PID in t.Cleanup (SIGTERM, then
// SIGKILL after a grace period). On Linux the children also receive SIGKILL
// when the test binary dies, so a crashed or killed `go test` leaves nothing
// running.
//
// A missing binary is a test failure, not a skip: an integration test that
// silently skips on a CI machine hides a broken pipeline. The failure names
// the command that installs the binary (.ci/install-deps installs them all).
// The kube-apiserver, which takes minutes to build, is the exception: its
// start reports ErrToolMissing and the caller decides (the deploy tests skip
// outside CI and fail under it).
package testsupport
