package apicheck

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/bufbuild/protocompile"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"

	debuginfov1 "github.com/profsym/profsym/gen/profsym/debuginfo/v1"
	"github.com/profsym/profsym/gen/profsym/debuginfo/v1/debuginfov1connect"
	symbolizerv1 "github.com/profsym/profsym/gen/profsym/symbolizer/v1"
	"github.com/profsym/profsym/gen/profsym/symbolizer/v1/symbolizerv1connect"
	"github.com/profsym/profsym/pkg/otlpprofiles/symbolize/symbolizetest"
	"github.com/profsym/profsym/pkg/symbolizecodec"
)

// protoRoot is the buf module root, relative to this package's directory (where go test
// runs).
var protoRoot = filepath.Join("..", "..", "proto")

var apiFiles = []struct {
	path      string
	goPackage string
	generated protoreflect.FileDescriptor
}{
	{
		"profsym/symbolizer/v1/symbolizer.proto",
		"github.com/profsym/profsym/gen/profsym/symbolizer/v1;symbolizerv1",
		symbolizerv1.File_profsym_symbolizer_v1_symbolizer_proto,
	},
	{
		"profsym/debuginfo/v1/debuginfo.proto",
		"github.com/profsym/profsym/gen/profsym/debuginfo/v1;debuginfov1",
		debuginfov1.File_profsym_debuginfo_v1_debuginfo_proto,
	},
}

// compileSources compiles the .proto sources with comments kept, independently of buf and
// of the generated code.
func compileSources(t *testing.T) map[string]protoreflect.FileDescriptor {
	t.Helper()
	c := protocompile.Compiler{
		Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{
			ImportPaths: []string{protoRoot},
		}),
		SourceInfoMode: protocompile.SourceInfoStandard,
	}
	paths := make([]string, 0, len(apiFiles))
	for _, f := range apiFiles {
		paths = append(paths, f.path)
	}
	files, err := c.Compile(context.Background(), paths...)
	if err != nil {
		t.Fatalf("compile %v: %v", paths, err)
	}
	out := make(map[string]protoreflect.FileDescriptor, len(files))
	for _, f := range files {
		out[f.Path()] = f
	}
	return out
}

// TestGeneratedIsCurrent fails when gen/ was not regenerated after a .proto change.
func TestGeneratedIsCurrent(t *testing.T) {
	sources := compileSources(t)
	for _, f := range apiFiles {
		t.Run(f.path, func(t *testing.T) {
			src := protodesc.ToFileDescriptorProto(sources[f.path])
			gen := protodesc.ToFileDescriptorProto(f.generated)
			// File options (go_package and the other languages' packages) come from
			// buf's managed mode, so the sources must not set any; comments are not
			// embedded in generated code.
			if src.Options != nil {
				t.Errorf("proto/%s sets file options %v: leave them to managed mode in buf.gen.yaml", f.path, src.Options)
			}
			if got, want := gen.GetOptions().GetGoPackage(), f.goPackage; got != want {
				t.Errorf("generated go_package %q, want %q", got, want)
			}
			for _, fd := range []*descriptorpb.FileDescriptorProto{src, gen} {
				fd.SourceCodeInfo = nil
				fd.Options = nil
			}
			if !proto.Equal(src, gen) {
				t.Errorf("gen/ does not match proto/%s: run `make generate` (go tool -modfile=tools/go.mod buf generate)\n%s",
					f.path, firstDifference(src, gen))
			}
		})
	}
}

// firstDifference shows where two descriptors part, so a stale gen/ is easy to place.
func firstDifference(src, gen proto.Message) string {
	opts := prototext.MarshalOptions{Multiline: true}
	a := strings.Split(opts.Format(src), "\n")
	b := strings.Split(opts.Format(gen), "\n")
	for i := range max(len(a), len(b)) {
		var la, lb string
		if i < len(a) {
			la = a[i]
		}
		if i < len(b) {
			lb = b[i]
		}
		if la != lb {
			return fmt.Sprintf("line %d: source %q, generated %q", i+1, la, lb)
		}
	}
	return "descriptors differ in unknown fields"
}

// TestEveryElementDocumented is the guarantee that a client can be written from the
// .proto files alone: every service, method, message, field, enum and enum value carries
// a leading comment.
func TestEveryElementDocumented(t *testing.T) {
	for path, fd := range compileSources(t) {
		locs := fd.SourceLocations()
		check := func(d protoreflect.Descriptor) {
			if strings.TrimSpace(locs.ByDescriptor(d).LeadingComments) == "" {
				t.Errorf("%s: %s has no leading comment", path, d.FullName())
			}
		}
		walkEnums := func(es protoreflect.EnumDescriptors) {
			for i := range es.Len() {
				e := es.Get(i)
				check(e)
				for j := range e.Values().Len() {
					check(e.Values().Get(j))
				}
			}
		}
		var walkMessages func(protoreflect.MessageDescriptors)
		walkMessages = func(ms protoreflect.MessageDescriptors) {
			for i := range ms.Len() {
				m := ms.Get(i)
				if m.IsMapEntry() {
					continue
				}
				check(m)
				for j := range m.Fields().Len() {
					check(m.Fields().Get(j))
				}
				walkEnums(m.Enums())
				walkMessages(m.Messages())
			}
		}
		walkEnums(fd.Enums())
		walkMessages(fd.Messages())
		for i := range fd.Services().Len() {
			s := fd.Services().Get(i)
			check(s)
			for j := range s.Methods().Len() {
				check(s.Methods().Get(j))
			}
		}
		if fd.Services().Len() != 1 {
			t.Errorf("%s: %d services, want 1", path, fd.Services().Len())
		}
	}
}

// upperSnake turns an enum name such as "BuildIDType" into "BUILD_ID_TYPE", the prefix
// buf's ENUM_VALUE_PREFIX rule expects.
func upperSnake(s string) string {
	var b strings.Builder
	r := []rune(s)
	for i, c := range r {
		upper := c >= 'A' && c <= 'Z'
		if i > 0 && upper {
			prevLower := r[i-1] >= 'a' && r[i-1] <= 'z' || r[i-1] >= '0' && r[i-1] <= '9'
			nextLower := i+1 < len(r) && r[i+1] >= 'a' && r[i+1] <= 'z'
			prevUpper := r[i-1] >= 'A' && r[i-1] <= 'Z'
			if prevLower || prevUpper && nextLower {
				b.WriteByte('_')
			}
		}
		b.WriteString(strings.ToUpper(string(c)))
	}
	return b.String()
}

func TestUpperSnake(t *testing.T) {
	for in, want := range map[string]string{
		"BuildIDType":        "BUILD_ID_TYPE",
		"ModuleStatus":       "MODULE_STATUS",
		"ShouldUploadReason": "SHOULD_UPLOAD_REASON",
		"Fidelity":           "FIDELITY",
		"SectionCompression": "SECTION_COMPRESSION",
	} {
		if got := upperSnake(in); got != want {
			t.Errorf("upperSnake(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestEnumConventions: the zero value of every enum means "not set" and is named
// <ENUM>_UNSPECIFIED, so an unset field never reads as a real status or reason; every
// value carries the enum's prefix.
func TestEnumConventions(t *testing.T) {
	for _, f := range apiFiles {
		enums := f.generated.Enums()
		if enums.Len() == 0 {
			t.Fatalf("%s: no enums", f.path)
		}
		for i := range enums.Len() {
			e := enums.Get(i)
			prefix := upperSnake(string(e.Name())) + "_"
			zero := e.Values().ByNumber(0)
			if zero == nil || string(zero.Name()) != prefix+"UNSPECIFIED" {
				t.Errorf("%s: zero value is %v, want %sUNSPECIFIED", e.FullName(), zero, prefix)
			}
			for j := range e.Values().Len() {
				v := e.Values().Get(j)
				if !strings.HasPrefix(string(v.Name()), prefix) {
					t.Errorf("%s: value %s lacks prefix %s", e.FullName(), v.Name(), prefix)
				}
			}
		}
	}
}

func findMessage(t *testing.T, name protoreflect.FullName) protoreflect.MessageDescriptor {
	t.Helper()
	for _, f := range apiFiles {
		pkg := f.generated.Package()
		if !strings.HasPrefix(string(name), string(pkg)+".") {
			continue
		}
		if m := f.generated.Messages().ByName(protoreflect.Name(strings.TrimPrefix(string(name), string(pkg)+"."))); m != nil {
			return m
		}
	}
	t.Fatalf("message %s not found", name)
	return nil
}

// TestFieldContract pins the fields the services, the gateway and the CLI rely on: names,
// numbers, types and cardinality. A change here is a wire break.
func TestFieldContract(t *testing.T) {
	const (
		sym = "profsym.symbolizer.v1."
		dbg = "profsym.debuginfo.v1."
	)
	type want struct {
		field    string
		number   protoreflect.FieldNumber
		kind     protoreflect.Kind
		repeated bool
		typeName protoreflect.FullName // message or enum type, if any
	}
	u64, u32, str, b := protoreflect.Uint64Kind, protoreflect.Uint32Kind, protoreflect.StringKind, protoreflect.BoolKind
	enum, msg := protoreflect.EnumKind, protoreflect.MessageKind
	cases := map[protoreflect.FullName][]want{
		sym + "SymbolizeRequest": {{"modules", 1, msg, true, sym + "Module"}},
		sym + "Module": {
			{"gnu_build_id", 1, str, false, ""},
			{"go_build_id", 2, str, false, ""},
			{"htlhash", 3, str, false, ""},
			{"memory_start", 4, u64, false, ""},
			{"memory_limit", 5, u64, false, ""},
			{"file_offset", 6, u64, false, ""},
			{"filename", 7, str, false, ""},
			{"addresses", 8, u64, true, ""},
			{"resident_only", 9, b, false, ""},
		},
		sym + "SymbolizeResponse": {{"modules", 1, msg, true, sym + "ModuleResult"}},
		sym + "ModuleResult": {
			{"status", 1, enum, false, sym + "ModuleStatus"},
			{"message", 2, str, false, ""},
			{"fidelity", 3, enum, false, sym + "Fidelity"},
			{"resolved_build_id", 4, str, false, ""},
			{"resolved_build_id_type", 5, enum, false, dbg + "BuildIDType"},
			{"frame_counts", 7, u32, true, ""},
			{"frames", 8, msg, false, sym + "FrameTable"},
			{"strings", 9, str, true, ""},
			{"companions", 10, msg, true, dbg + "Companion"},
			{"upload_in_progress", 11, b, false, ""},
		},
		sym + "FrameTable": {
			{"function_names", 1, u32, true, ""},
			{"linkage_names", 2, u32, true, ""},
			{"files", 3, u32, true, ""},
			{"lines", 4, u32, true, ""},
			{"columns", 5, u32, true, ""},
			{"start_lines", 6, u32, true, ""},
		},
		dbg + "ShouldUploadRequest": {
			{"build_id", 1, str, false, ""},
			{"build_id_type", 2, enum, false, dbg + "BuildIDType"},
			{"type", 3, enum, false, dbg + "DebuginfoType"},
			{"sha256", 4, str, false, ""},
			{"size", 5, u64, false, ""},
			{"source", 6, enum, false, dbg + "UploadSource"},
		},
		dbg + "ShouldUploadResponse": {
			{"should_upload", 1, b, false, ""},
			{"reason", 2, enum, false, dbg + "ShouldUploadReason"},
			{"message", 3, str, false, ""},
		},
		dbg + "InitiateUploadRequest": {
			{"build_id", 1, str, false, ""},
			{"build_id_type", 2, enum, false, dbg + "BuildIDType"},
			{"type", 3, enum, false, dbg + "DebuginfoType"},
			{"sha256", 4, str, false, ""},
			{"size", 5, u64, false, ""},
			{"source", 6, enum, false, dbg + "UploadSource"},
			{"name", 7, str, false, ""},
		},
		dbg + "InitiateUploadResponse": {
			{"upload_id", 1, str, false, ""},
			{"upload_url", 2, str, false, ""},
			{"method", 3, str, false, ""},
			{"required_headers", 4, msg, false, ""}, // map<string, string>
			{"expires_at", 5, msg, false, "google.protobuf.Timestamp"},
			{"max_size", 6, u64, false, ""},
		},
		dbg + "FinishUploadRequest": {
			{"build_id", 1, str, false, ""},
			{"upload_id", 2, str, false, ""},
		},
		dbg + "FinishUploadResponse": {{"debuginfo", 1, msg, false, dbg + "Debuginfo"}},
		dbg + "GetRequest": {
			{"build_id", 1, str, false, ""},
			{"build_id_type", 2, enum, false, dbg + "BuildIDType"},
		},
		dbg + "GetResponse": {{"debuginfo", 1, msg, false, dbg + "Debuginfo"}},
		dbg + "ListRequest": {
			{"page_size", 1, u32, false, ""},
			{"page_token", 2, str, false, ""},
		},
		dbg + "ListResponse": {
			{"debuginfos", 1, msg, true, dbg + "Debuginfo"},
			{"next_page_token", 2, str, false, ""},
		},
		dbg + "DeleteRequest": {
			{"build_id", 1, str, false, ""},
			{"build_id_type", 2, enum, false, dbg + "BuildIDType"},
		},
		dbg + "DeleteResponse": {},
		dbg + "BinaryID": {
			{"type", 1, enum, false, dbg + "BuildIDType"},
			{"id", 2, str, false, ""},
		},
		dbg + "Debuginfo": {
			{"build_id", 1, str, false, ""},
			{"build_id_type", 2, enum, false, dbg + "BuildIDType"},
			{"ids", 3, msg, true, dbg + "BinaryID"},
			{"type", 4, enum, false, dbg + "DebuginfoType"},
			{"source", 5, enum, false, dbg + "UploadSource"},
			{"state", 6, enum, false, dbg + "DebuginfoState"},
			{"quality", 7, msg, false, dbg + "Quality"},
			{"sha256", 8, str, false, ""},
			{"size", 9, u64, false, ""},
			{"uploaded_at", 10, msg, false, "google.protobuf.Timestamp"},
			{"has_program_headers", 11, b, false, ""},
			{"companions", 12, msg, true, dbg + "Companion"},
			{"name", 13, str, false, ""},
			{"last_used", 14, msg, false, "google.protobuf.Timestamp"},
		},
		dbg + "Companion": {
			{"kind", 1, enum, false, dbg + "CompanionKind"},
			{"id", 2, str, false, ""},
			{"state", 3, enum, false, dbg + "CompanionState"},
		},
		dbg + "Quality": {
			{"has_dwarf", 1, b, false, ""},
			{"dwarf_version", 2, u32, false, ""},
			{"has_inline_info", 3, b, false, ""},
			{"has_gopclntab", 4, b, false, ""},
			{"has_symtab", 5, b, false, ""},
			{"has_dynsym", 6, b, false, ""},
			{"has_minidebuginfo", 7, b, false, ""},
			{"has_debuglink", 8, b, false, ""},
			{"debug_compression", 9, enum, false, dbg + "SectionCompression"},
			{"dwarf_error", 10, str, false, ""},
		},
		dbg + "Coverage": {
			{"build_id", 1, str, false, ""},
			{"build_id_type", 2, enum, false, dbg + "BuildIDType"},
			{"frames_asked", 3, u64, false, ""},
			{"frames_resolved", 4, u64, false, ""},
			{"fidelity", 5, enum, false, dbg + "CoverageFidelity"},
			{"reason", 6, enum, false, dbg + "CoverageReason"},
			{"first_seen", 7, msg, false, "google.protobuf.Timestamp"},
			{"last_seen", 8, msg, false, "google.protobuf.Timestamp"},
			{"filenames", 9, str, true, ""},
			{"missing_companions", 10, msg, true, dbg + "Companion"},
			{"kernel", 11, msg, false, dbg + "KernelDebuginfo"},
		},
		dbg + "KernelDebuginfo": {
			{"release", 1, str, false, ""},
			{"module", 2, str, false, ""},
			{"packages", 3, str, true, ""},
		},
		dbg + "ListCoverageRequest": {
			{"reason", 1, enum, false, dbg + "CoverageReason"},
			{"since", 2, msg, false, "google.protobuf.Timestamp"},
			{"unresolved_only", 3, b, false, ""},
			{"limit", 4, u32, false, ""},
		},
		dbg + "ListCoverageResponse": {
			{"entries", 1, msg, true, dbg + "Coverage"},
			{"total", 2, u64, false, ""},
		},
	}
	seen := 0
	for name, fields := range cases {
		m := findMessage(t, name)
		if got := m.Fields().Len(); got != len(fields) {
			t.Errorf("%s: %d fields, want %d", name, got, len(fields))
		}
		for _, w := range fields {
			fd := m.Fields().ByName(protoreflect.Name(w.field))
			if fd == nil {
				t.Errorf("%s.%s: missing", name, w.field)
				continue
			}
			if fd.Number() != w.number || fd.Kind() != w.kind || fd.IsList() != w.repeated {
				t.Errorf("%s.%s: number %d kind %v repeated %v, want %d %v %v",
					name, w.field, fd.Number(), fd.Kind(), fd.IsList(), w.number, w.kind, w.repeated)
			}
			var typeName protoreflect.FullName
			switch {
			case fd.IsMap():
				if fd.MapKey().Kind() != str || fd.MapValue().Kind() != str {
					t.Errorf("%s.%s: want map<string, string>", name, w.field)
				}
			case fd.Enum() != nil:
				typeName = fd.Enum().FullName()
			case fd.Message() != nil:
				typeName = fd.Message().FullName()
			}
			if typeName != w.typeName {
				t.Errorf("%s.%s: type %s, want %s", name, w.field, typeName, w.typeName)
			}
		}
		seen++
	}
	total := 0
	for _, f := range apiFiles {
		total += f.generated.Messages().Len()
	}
	if seen != total {
		t.Errorf("contract covers %d messages, the files define %d: add the new ones here", seen, total)
	}
}

// TestEnumContract pins the enum values that clients switch on.
func TestEnumContract(t *testing.T) {
	cases := map[protoreflect.FullName][]string{
		"profsym.symbolizer.v1.ModuleStatus":  {"OK", "NOT_FOUND", "INVALID_DEBUGINFO", "UNAVAILABLE", "INVALID_MAPPING", "EXECUTABLE_NEEDED", "NOT_RESIDENT"},
		"profsym.symbolizer.v1.Fidelity":      {"SYMBOLS", "LINES", "FULL"},
		"profsym.debuginfo.v1.BuildIDType":    {"GNU", "GO", "HTLHASH"},
		"profsym.debuginfo.v1.DebuginfoType":  {"DEBUGINFO", "EXECUTABLE", "SUPPLEMENTARY", "DWARF_PACKAGE"},
		"profsym.debuginfo.v1.CompanionKind":  {"SUPPLEMENTARY", "DWARF_PACKAGE"},
		"profsym.debuginfo.v1.CompanionState": {"AVAILABLE", "MISSING"},
		"profsym.debuginfo.v1.UploadSource":   {"CI", "NODE", "DEBUGINFOD"},
		"profsym.debuginfo.v1.ShouldUploadReason": {
			"FIRST", "ALREADY_STORED", "UPLOAD_IN_PROGRESS", "BETTER_STORED",
			"REPLACES_WORSE", "PREVIOUS_UPLOAD_STALE", "TOO_LARGE", "EXECUTABLE_NEEDED",
		},
		"profsym.debuginfo.v1.CoverageReason": {
			"NO_DEBUGINFO", "INVALID_FILE", "UPSTREAM_MISS", "EXECUTABLE_NEEDED", "INVALID_MAPPING", "NO_SYMBOLS",
			"COMPANION_MISSING",
		},
		"profsym.debuginfo.v1.CoverageFidelity":   {"SYMBOLS", "LINES", "FULL"},
		"profsym.debuginfo.v1.DebuginfoState":     {"UPLOADING", "AVAILABLE", "INVALID"},
		"profsym.debuginfo.v1.SectionCompression": {"NONE", "ZLIB", "ZSTD"},
	}
	seen := 0
	for _, f := range apiFiles {
		for i := range f.generated.Enums().Len() {
			e := f.generated.Enums().Get(i)
			values, ok := cases[e.FullName()]
			if !ok {
				t.Errorf("%s: not in the contract: add it here", e.FullName())
				continue
			}
			seen++
			if got := e.Values().Len(); got != len(values)+1 {
				t.Errorf("%s: %d values, want %d", e.FullName(), got, len(values)+1)
			}
			prefix := upperSnake(string(e.Name())) + "_"
			for n, v := range values {
				ev := e.Values().ByName(protoreflect.Name(prefix + v))
				if ev == nil || ev.Number() != protoreflect.EnumNumber(n+1) {
					t.Errorf("%s: %s%s should be %d, got %v", e.FullName(), prefix, v, n+1, ev)
				}
			}
		}
	}
	if seen != len(cases) {
		t.Errorf("found %d of the %d enums in the contract", seen, len(cases))
	}
}

// TestMethodContract pins the RPCs, their types and idempotency levels (NO_SIDE_EFFECTS
// lets Connect clients use HTTP GET, which caches and retries freely).
func TestMethodContract(t *testing.T) {
	type want struct {
		in, out     protoreflect.FullName
		idempotency descriptorpb.MethodOptions_IdempotencyLevel
	}
	noSideEffects, idempotent := descriptorpb.MethodOptions_NO_SIDE_EFFECTS, descriptorpb.MethodOptions_IDEMPOTENT
	services := map[protoreflect.FullName]map[protoreflect.Name]want{
		"profsym.symbolizer.v1.SymbolizerService": {
			"Symbolize": {"profsym.symbolizer.v1.SymbolizeRequest", "profsym.symbolizer.v1.SymbolizeResponse", noSideEffects},
		},
		"profsym.debuginfo.v1.DebuginfoService": {
			"ShouldUpload":   {"profsym.debuginfo.v1.ShouldUploadRequest", "profsym.debuginfo.v1.ShouldUploadResponse", noSideEffects},
			"InitiateUpload": {"profsym.debuginfo.v1.InitiateUploadRequest", "profsym.debuginfo.v1.InitiateUploadResponse", idempotent},
			"FinishUpload":   {"profsym.debuginfo.v1.FinishUploadRequest", "profsym.debuginfo.v1.FinishUploadResponse", idempotent},
			"Get":            {"profsym.debuginfo.v1.GetRequest", "profsym.debuginfo.v1.GetResponse", noSideEffects},
			"List":           {"profsym.debuginfo.v1.ListRequest", "profsym.debuginfo.v1.ListResponse", noSideEffects},
			"Delete":         {"profsym.debuginfo.v1.DeleteRequest", "profsym.debuginfo.v1.DeleteResponse", idempotent},
			"ListCoverage":   {"profsym.debuginfo.v1.ListCoverageRequest", "profsym.debuginfo.v1.ListCoverageResponse", noSideEffects},
		},
	}
	for _, f := range apiFiles {
		s := f.generated.Services().Get(0)
		methods, ok := services[s.FullName()]
		if !ok {
			t.Errorf("unexpected service %s", s.FullName())
			continue
		}
		if s.Methods().Len() != len(methods) {
			t.Errorf("%s: %d methods, want %d", s.FullName(), s.Methods().Len(), len(methods))
		}
		for name, w := range methods {
			m := s.Methods().ByName(name)
			if m == nil {
				t.Errorf("%s.%s: missing", s.FullName(), name)
				continue
			}
			if m.IsStreamingClient() || m.IsStreamingServer() {
				t.Errorf("%s.%s: streaming; the API is unary only", s.FullName(), name)
			}
			if m.Input().FullName() != w.in || m.Output().FullName() != w.out {
				t.Errorf("%s.%s: %s -> %s, want %s -> %s", s.FullName(), name, m.Input().FullName(), m.Output().FullName(), w.in, w.out)
			}
			opts, _ := m.Options().(*descriptorpb.MethodOptions)
			if got := opts.GetIdempotencyLevel(); got != w.idempotency {
				t.Errorf("%s.%s: idempotency %v, want %v", s.FullName(), name, got, w.idempotency)
			}
		}
	}
	if got, want := symbolizerv1connect.SymbolizerServiceSymbolizeProcedure, "/profsym.symbolizer.v1.SymbolizerService/Symbolize"; got != want {
		t.Errorf("procedure %q, want %q", got, want)
	}
}

// symbolizeEcho answers each address with one frame naming it, so the test can see that
// request order and per-address alignment survive the wire.
type symbolizeEcho struct{}

func (symbolizeEcho) Symbolize(_ context.Context, req *connect.Request[symbolizerv1.SymbolizeRequest]) (*connect.Response[symbolizerv1.SymbolizeResponse], error) {
	if len(req.Msg.GetModules()) == 0 {
		return nil, connect.NewError(connect.CodeInvalidArgument, nil)
	}
	resp := &symbolizerv1.SymbolizeResponse{}
	for _, m := range req.Msg.GetModules() {
		r := &symbolizerv1.ModuleResult{
			Status:              symbolizerv1.ModuleStatus_MODULE_STATUS_OK,
			Fidelity:            symbolizerv1.Fidelity_FIDELITY_SYMBOLS,
			ResolvedBuildId:     m.GetGnuBuildId(),
			ResolvedBuildIdType: debuginfov1.BuildIDType_BUILD_ID_TYPE_GNU,
		}
		var locs [][]symbolizecodec.Frame
		for _, a := range m.GetAddresses() {
			locs = append(locs, []symbolizecodec.Frame{{Function: m.GetFilename(), Line: uint32(a)}})
		}
		symbolizetest.Answer(r, locs)
		resp.Modules = append(resp.Modules, r)
	}
	return connect.NewResponse(resp), nil
}

// TestConnectRoundTrip serves the generated handler and calls it with the generated
// client over each protocol the service promises (Connect with POST and GET, gRPC,
// gRPC-Web), so generated code, idempotency options and the stdlib HTTP/2 setup agree.
func TestConnectRoundTrip(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle(symbolizerv1connect.NewSymbolizerServiceHandler(symbolizeEcho{}))
	mux.Handle(debuginfov1connect.NewDebuginfoServiceHandler(debuginfov1connect.UnimplementedDebuginfoServiceHandler{}))
	srv := httptest.NewUnstartedServer(mux)
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	srv.Config.Protocols = &protocols
	srv.Start()
	t.Cleanup(srv.Close)

	h2c := &http.Client{Transport: &http.Transport{Protocols: func() *http.Protocols {
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		return &p
	}()}}

	req := &symbolizerv1.SymbolizeRequest{Modules: []*symbolizerv1.Module{
		{GnuBuildId: "aa", Filename: "first", Addresses: []uint64{3, 1, 2}},
		{GnuBuildId: "bb", Filename: "second", Addresses: []uint64{7}},
	}}
	tests := []struct {
		name   string
		client *http.Client
		opts   []connect.ClientOption
	}{
		{"connect-post", srv.Client(), nil},
		{"connect-get", srv.Client(), []connect.ClientOption{connect.WithHTTPGet()}},
		{"grpc", h2c, []connect.ClientOption{connect.WithGRPC()}},
		{"grpc-web", srv.Client(), []connect.ClientOption{connect.WithGRPCWeb()}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			client := symbolizerv1connect.NewSymbolizerServiceClient(tc.client, srv.URL, tc.opts...)
			resp, err := client.Symbolize(context.Background(), connect.NewRequest(req))
			if err != nil {
				t.Fatalf("Symbolize: %v", err)
			}
			got := resp.Msg.GetModules()
			if len(got) != 2 {
				t.Fatalf("%d module results, want 2", len(got))
			}
			for i, m := range req.GetModules() {
				r := got[i]
				locs, err := symbolizecodec.Decode(r, len(m.GetAddresses()))
				if r.GetResolvedBuildId() != m.GetGnuBuildId() || err != nil {
					t.Fatalf("module %d: result %v does not answer %v: %v", i, r, m, err)
				}
				for j, a := range m.GetAddresses() {
					f := locs[j][0]
					if f.Line != uint32(a) || f.Function != m.GetFilename() {
						t.Errorf("module %d location %d: frame %v, want line %d in %s", i, j, f, a, m.GetFilename())
					}
				}
			}

			_, err = client.Symbolize(context.Background(), connect.NewRequest(&symbolizerv1.SymbolizeRequest{}))
			if connect.CodeOf(err) != connect.CodeInvalidArgument {
				t.Errorf("empty request: %v, want invalid_argument", err)
			}

			dbg := debuginfov1connect.NewDebuginfoServiceClient(tc.client, srv.URL, tc.opts...)
			_, err = dbg.Get(context.Background(), connect.NewRequest(&debuginfov1.GetRequest{BuildId: "aa"}))
			if connect.CodeOf(err) != connect.CodeUnimplemented {
				t.Errorf("unimplemented Get: %v, want unimplemented", err)
			}
		})
	}
}
