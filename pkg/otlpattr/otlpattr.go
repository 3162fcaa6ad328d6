// Package otlpattr names the OpenTelemetry attribute keys and values that profsym's collector
// writes and its gateway reads, as the semantic conventions spell them (registry groups
// "process", "profile", "pprof", "container", "host", "k8s"; development stability).
package otlpattr

// Binary identity, carried on Mapping attributes. GNU and htlhash are lower-case hex; the Go
// build ID is the Go linker's string (as `go tool buildid` prints it).
const (
	BuildIDGNU     = "process.executable.build_id.gnu"
	BuildIDGo      = "process.executable.build_id.go"
	BuildIDHTLHash = "process.executable.build_id.htlhash"
)

// FrameType is the Location attribute that says which runtime a frame belongs to.
const FrameType = "profile.frame.type"

// Well-known values of FrameType that profsym produces or symbolizes.
const (
	FrameTypeNative = "native"
	FrameTypeKernel = "kernel"
	FrameTypeGo     = "go"
	FrameTypeRust   = "rust"
)

// pprof compatibility attributes on a Mapping: set (true) as far as symbolization filled the
// mapping's locations, so pprof tools do not symbolize again.
const (
	MappingHasFunctions    = "pprof.mapping.has_functions"
	MappingHasFilenames    = "pprof.mapping.has_filenames"
	MappingHasLineNumbers  = "pprof.mapping.has_line_numbers"
	MappingHasInlineFrames = "pprof.mapping.has_inline_frames"
	LocationIsFolded       = "pprof.location.is_folded"
)

// Resource and sample attributes the collector sets.
const (
	ProcessPID            = "process.pid"
	ProcessExecutableName = "process.executable.name"
	ProcessExecutablePath = "process.executable.path"
	ThreadID              = "thread.id"
	ThreadName            = "thread.name"
	ContainerID           = "container.id"
	HostName              = "host.name"
	K8sNodeName           = "k8s.node.name"
	K8sPodName            = "k8s.pod.name"
	K8sNamespaceName      = "k8s.namespace.name"
)
