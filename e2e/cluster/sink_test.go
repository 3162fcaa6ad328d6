//go:build linux

package cluster_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/grpc"
	_ "google.golang.org/grpc/encoding/gzip" // the gateway's exporter compresses with gzip

	"golang.org/x/sys/unix"

	"github.com/profsym/profsym/e2e/cluster"
	"github.com/profsym/profsym/pkg/otlpattr"
	"github.com/profsym/profsym/pkg/otlpprofiles"
	"github.com/profsym/profsym/pkg/otlpprofiles/otlptest"
)

// sinkAddr is where the gateway sends its profiles (gateway.otlpGrpcEndpoint in
// testdata/values.yaml): the test's OTLP/gRPC receiver, listening on the node's address inside
// the cluster's network namespace.
const sinkAddr = cluster.NodeIP + ":4317"

// sunk is one export request the sink received.
type sunk struct {
	at time.Time
	pd pprofile.Profiles
}

// otlpSink is the downstream OTLP receiver of the gateway: it keeps every request and the
// samples of each collector interval, by the interval's end (every profile of a collector
// request has the same time and duration, which the gateway passes on unchanged).
type otlpSink struct {
	mu       sync.Mutex
	requests []sunk
	byEnd    map[int64]int64 // interval end, Unix ns -> samples
	total    int64
}

func startSink(c *cluster.Cluster) (*otlpSink, func(), error) {
	l, err := c.Dialer().Listen("tcp", sinkAddr)
	if err != nil {
		return nil, nil, err
	}
	s := &otlpSink{byEnd: map[int64]int64{}}
	srv := otlptest.NewProfilesServer(s.Export, grpc.MaxRecvMsgSize(64<<20))
	go func() { _ = srv.Serve(l) }()
	return s, srv.Stop, nil
}

func (s *otlpSink) Export(_ context.Context, req pprofileotlp.ExportRequest) (pprofileotlp.ExportResponse, error) {
	// The request was decoded from the wire for this call alone: the sink may keep it.
	pd := req.Profiles()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, sunk{time.Now(), pd})
	forProfiles(pd, func(_ pcommon.Map, p pprofile.Profile) {
		end := int64(p.Time()) + int64(p.DurationNano())
		n := sampleCount(p)
		s.byEnd[end] += n
		s.total += n
	})
	return pprofileotlp.NewExportResponse(), nil
}

// since returns the requests received at or after t.
func (s *otlpSink) since(t time.Time) []pprofile.Profiles {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []pprofile.Profiles
	for _, r := range s.requests {
		if !r.at.Before(t) {
			out = append(out, r.pd)
		}
	}
	return out
}

// intervals returns a copy of the samples by interval end, and their total.
func (s *otlpSink) intervals() (map[int64]int64, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := make(map[int64]int64, len(s.byEnd))
	for k, v := range s.byEnd {
		m[k] = v
	}
	return m, s.total
}

// forProfiles calls fn with every profile of pd and its resource's attributes.
func forProfiles(pd pprofile.Profiles, fn func(resource pcommon.Map, p pprofile.Profile)) {
	rps := pd.ResourceProfiles()
	for i := 0; i < rps.Len(); i++ {
		rp := rps.At(i)
		sps := rp.ScopeProfiles()
		for j := 0; j < sps.Len(); j++ {
			ps := sps.At(j).Profiles()
			for k := 0; k < ps.Len(); k++ {
				fn(rp.Resource().Attributes(), ps.At(k))
			}
		}
	}
}

// sampleCount is the number of samples a profile holds: the sum of its samples' values (the
// collector appends one value, 1, per timestamp; the gateway keeps them as they are).
func sampleCount(p pprofile.Profile) int64 {
	var n int64
	for i := 0; i < p.Samples().Len(); i++ {
		vs := p.Samples().At(i).Values()
		for j := 0; j < vs.Len(); j++ {
			n += vs.At(j)
		}
	}
	return n
}

// resourceStrings returns a resource's string attributes.
func resourceStrings(m pcommon.Map) map[string]string {
	out := map[string]string{}
	for k, v := range m.All() {
		out[k] = v.AsString()
	}
	return out
}

// interval is one request the collector built, as its debug log reports it.
type interval struct {
	at      time.Time
	samples int64
	pod     string // the collector pod's log it is in
}

// upload is one file the collector offered to the symbolizer and what became of it.
type upload struct {
	file, buildID, outcome string
}

// collectorLogs reads the collector pods' container logs on the node (the kubelet's
// podLogsDir), every pod's and container's, as they are written: a file stays open once
// found, so the lines a pod writes before it is deleted are read even after the kubelet
// removes the file.
type collectorLogs struct {
	glob string

	mu        sync.Mutex
	files     map[string]*logFile // by device and inode
	intervals []interval
	uploads   []upload
	warnings  []string
}

type logFile struct {
	f       *os.File
	pending []byte
	pod     string
	partial strings.Builder
}

func newCollectorLogs(clusterDir string) *collectorLogs {
	return &collectorLogs{
		glob:  filepath.Join(clusterDir, "kubelet", "pod-logs", "profsym-collector_collector-*", "collector", "*.log"),
		files: map[string]*logFile{},
	}
}

// run reads until ctx ends, then once more to the end of every file.
func (l *collectorLogs) run(ctx context.Context) {
	for {
		l.poll()
		select {
		case <-ctx.Done():
			l.poll()
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
}

var (
	intervalLine = regexp.MustCompile(`^time=(\S+) level=DEBUG msg="interval reported" samples=(\d+) `)
	uploadLine   = regexp.MustCompile(`msg="debuginfo upload" file=("(?:[^"\\]|\\.)*"|\S+) build_id=(\S+) outcome=(\S+)`)
	warnLine     = regexp.MustCompile(`level=(WARN|ERROR) `)
)

func (l *collectorLogs) poll() {
	paths, _ := filepath.Glob(l.glob)
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range paths {
		// By inode: the kubelet rotates a large log by renaming it and starting another under
		// the same name.
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		var st unix.Stat_t
		if unix.Fstat(int(f.Fd()), &st) != nil {
			_ = f.Close()
			continue
		}
		key := fmt.Sprintf("%d:%d", st.Dev, st.Ino)
		if _, ok := l.files[key]; ok {
			_ = f.Close()
			continue
		}
		// .../pod-logs/NAMESPACE_POD_UID/collector/N.log
		parts := strings.Split(filepath.Base(filepath.Dir(filepath.Dir(p))), "_")
		pod := ""
		if len(parts) == 3 {
			pod = parts[1]
		}
		l.files[key] = &logFile{f: f, pod: pod}
	}
	for _, lf := range l.files {
		// A regular file read at its end says io.EOF, and gives what was written since on the
		// next read: the incomplete last line waits in pending.
		data, _ := io.ReadAll(lf.f)
		lf.pending = append(lf.pending, data...)
		for {
			i := bytes.IndexByte(lf.pending, '\n')
			if i < 0 {
				break
			}
			line := string(lf.pending[:i])
			lf.pending = lf.pending[i+1:]
			// CRI log format: TIME STREAM P|F MESSAGE; P is a part of a longer line.
			fields := strings.SplitN(line, " ", 4)
			if len(fields) != 4 {
				continue
			}
			lf.partial.WriteString(fields[3])
			if fields[2] == "P" {
				continue
			}
			msg := lf.partial.String()
			lf.partial.Reset()
			l.parse(lf.pod, msg)
		}
	}
}

func (l *collectorLogs) parse(pod, msg string) {
	if m := intervalLine.FindStringSubmatch(msg); m != nil {
		at, err1 := time.Parse(time.RFC3339Nano, m[1])
		n, err2 := strconv.ParseInt(m[2], 10, 64)
		if err1 == nil && err2 == nil {
			l.intervals = append(l.intervals, interval{at, n, pod})
		}
		return
	}
	if m := uploadLine.FindStringSubmatch(msg); m != nil {
		file := m[1]
		if uq, err := strconv.Unquote(file); err == nil {
			file = uq
		}
		l.uploads = append(l.uploads, upload{file, m[2], m[3]})
		return
	}
	if warnLine.MatchString(msg) {
		l.warnings = append(l.warnings, pod+": "+msg)
	}
}

func (l *collectorLogs) snapshot() ([]interval, []upload, []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]interval(nil), l.intervals...), append([]upload(nil), l.uploads...), append([]string(nil), l.warnings...)
}

func (l *collectorLogs) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, lf := range l.files {
		_ = lf.f.Close()
	}
}

// tally is what the collector sent against what left the gateway over some intervals.
type tally struct {
	intervals, in, out, lost, lostIntervals int64
}

func (t tally) String() string {
	return fmt.Sprintf("%d intervals: %d samples in, %d out, %d lost (%d intervals short)", t.intervals, t.in, t.out, t.lost, t.lostIntervals)
}

// matchIntervals pairs every interval the collector reported with the samples the sink got
// for it: the interval whose end is the closest to the log line's time (the collector logs it
// right after it ends the interval), within 5 s (the intervals are 10 s apart). It returns,
// per interval, the samples out (-1: none), and the sink's intervals no log line accounts for.
func matchIntervals(ins []interval, outs map[int64]int64) ([]int64, []int64) {
	ends := make([]int64, 0, len(outs))
	for e := range outs {
		ends = append(ends, e)
	}
	sort.Slice(ends, func(i, j int) bool { return ends[i] < ends[j] })
	taken := map[int64]bool{}
	got := make([]int64, len(ins))
	for i, in := range ins {
		got[i] = -1
		t := in.at.UnixNano()
		best, bestD := int64(0), int64(-1)
		for _, e := range ends {
			d := t - e
			if d < -int64(time.Second) || d > 5*int64(time.Second) || taken[e] {
				continue
			}
			if d < 0 {
				d = -d
			}
			if bestD < 0 || d < bestD {
				best, bestD = e, d
			}
		}
		if bestD >= 0 {
			taken[best] = true
			got[i] = outs[best]
		}
	}
	var extra []int64
	for _, e := range ends {
		if !taken[e] {
			extra = append(extra, e)
		}
	}
	return got, extra
}

// tallyOf sums the intervals whose log time lies in [from, to].
func tallyOf(ins []interval, got []int64, from, to time.Time) tally {
	var t tally
	for i, in := range ins {
		if in.at.Before(from) || in.at.After(to) {
			continue
		}
		t.intervals++
		t.in += in.samples
		out := max(got[i], 0)
		t.out += out
		if out < in.samples {
			t.lost += in.samples - out
			t.lostIntervals++
		}
	}
	return t
}

// location is one address of a workload's own executable in the profiles, with the frames
// the gateway gave it (innermost first) and the samples that hold it, unsymbolized ones apart.
type location struct {
	address               uint64
	frames                []otlpprofiles.Frame
	samples, unsymbolized int64
}

// workloadProfile is what the profiles say of one workload pod.
type workloadProfile struct {
	samples, whole int64
	// roots counts the outermost frame of each sample, by function ("" unsymbolized).
	roots map[string]int64
	// resources are the distinct resource attribute sets of the pod's profiles.
	resources []map[string]string
	locations map[uint64]*location
	buildID   string            // the executable's: GNU, else Go, else htlhash
	ids       map[string]string // the executable's build IDs, by attribute
	exe       string            // the executable's mapping file name
}

// buildIDs are the executable's build IDs.
func (w *workloadProfile) buildIDs() []string {
	var out []string
	for _, id := range w.ids {
		out = append(out, id)
	}
	return out
}

// profileOf gathers the samples of pod (its k8s.pod.name) from pds; exe is the path of the
// workload's executable in its container, roots the functions a whole stack ends in.
func profileOf(pds []pprofile.Profiles, pod, exe string, roots []string) *workloadProfile {
	w := &workloadProfile{roots: map[string]int64{}, locations: map[uint64]*location{}}
	seen := map[string]bool{}
	for _, pd := range pds {
		d := pd.Dictionary()
		forProfiles(pd, func(res pcommon.Map, p pprofile.Profile) {
			attrs := resourceStrings(res)
			if attrs["k8s.pod.name"] != pod {
				return
			}
			key := fmt.Sprint(attrs)
			if !seen[key] {
				seen[key] = true
				w.resources = append(w.resources, attrs)
			}
			for i := 0; i < p.Samples().Len(); i++ {
				s := p.Samples().At(i)
				var n int64
				for j := 0; j < s.Values().Len(); j++ {
					n += s.Values().At(j)
				}
				frames, err := otlpprofiles.StackFrames(d, s.StackIndex())
				if err != nil || len(frames) == 0 {
					w.samples += n
					w.roots["(no frames)"] += n
					continue
				}
				w.samples += n
				root := frames[len(frames)-1].Function
				w.roots[root] += n
				for _, r := range roots {
					if root == r {
						w.whole += n
					}
				}
				for _, li := range otlpprofiles.Stack(d, s.StackIndex()) {
					loc, ok := otlpprofiles.Location(d, li)
					if !ok {
						continue
					}
					m, ok := otlpprofiles.Mapping(d, loc.MappingIndex())
					if !ok || otlpprofiles.Str(d, m.FilenameStrindex()) != exe {
						continue
					}
					if w.ids == nil {
						w.ids = map[string]string{}
						for _, k := range []string{otlpattr.BuildIDGNU, otlpattr.BuildIDGo, otlpattr.BuildIDHTLHash} {
							if id := otlpprofiles.AttrStr(d, m.AttributeIndices(), k); id != "" {
								w.ids[k] = id
								if w.buildID == "" {
									w.buildID = id
								}
							}
						}
						w.exe = exe
					}
					l := w.locations[loc.Address()]
					if l == nil {
						l = &location{address: loc.Address()}
						w.locations[loc.Address()] = l
					}
					l.samples += n
					if loc.Lines().Len() == 0 {
						l.unsymbolized += n
					} else if len(l.frames) == 0 {
						for k := 0; k < loc.Lines().Len(); k++ {
							ln := loc.Lines().At(k)
							f := otlpprofiles.Frame{Line: ln.Line(), Inlined: k < loc.Lines().Len()-1}
							if fn, ok := otlpprofiles.Function(d, ln.FunctionIndex()); ok && ln.FunctionIndex() != 0 {
								f.Function = otlpprofiles.Str(d, fn.NameStrindex())
								f.File = otlpprofiles.Str(d, fn.FilenameStrindex())
							}
							l.frames = append(l.frames, f)
						}
					}
				}
			}
		})
	}
	return w
}

// functions are the distinct functions of the workload's own executable in the profiles.
func (w *workloadProfile) functions() []string {
	var out []string
	seen := map[string]bool{}
	for _, l := range w.locations {
		for _, f := range l.frames {
			if f.Function != "" && !seen[f.Function] {
				seen[f.Function] = true
				out = append(out, f.Function)
			}
		}
	}
	sort.Strings(out)
	return out
}
