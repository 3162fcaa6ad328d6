package perfmap

import "strings"

// Frame types of the runtimes that write perf maps, as the OpenTelemetry eBPF profiler names
// them in profile.frame.type.
const (
	FrameTypeV8JS    = "v8js"
	FrameTypeJVM     = "jvm"
	FrameTypeCPython = "cpython"
	FrameTypeNative  = "native"
)

// FrameType returns the frame type of code a perf map names in a process running the
// executable exe (its base name): V8 for Node.js, the JVM for java, CPython for python3.12
// and later with -X perf; native for anything else (a runtime the collector does not know
// writes a perf map for generated machine code all the same).
func FrameType(exe string) string {
	switch {
	case exe == "node" || exe == "nodejs" || strings.HasPrefix(exe, "node") && isDigits(exe[len("node"):]):
		return FrameTypeV8JS
	case exe == "java":
		return FrameTypeJVM
	case strings.HasPrefix(exe, "python"):
		return FrameTypeCPython
	}
	return FrameTypeNative
}

func isDigits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
