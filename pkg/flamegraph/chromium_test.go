package flamegraph

import (
	"bytes"
	"context"
	"image"
	"image/png"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// chromium finds Debian's chromium (.ci/install-deps installs it); a developer machine without
// it skips, CI fails.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium is required (bash .ci/install-deps installs it)")
	}
	t.Skip("chromium not installed (bash .ci/install-deps installs it)")
	return ""
}

// frameBox is a drawn frame as the page laid it out.
type frameBox struct {
	Name    string  `json:"name"`
	Text    string  `json:"text"`
	Title   string  `json:"title"`
	Class   string  `json:"class"`
	Left    float64 `json:"left"`
	Width   float64 `json:"width"`
	Top     float64 `json:"top"`
	Visible bool    `json:"visible"`
}

const readFrames = `Array.from(document.querySelectorAll("#graph .frame")).map(function (d) {
  var r = d.getBoundingClientRect();
  var hit = document.elementFromPoint(r.left + Math.min(r.width / 2, 5), r.top + r.height / 2);
  return {name: d.dataset.name, text: d.textContent, title: d.title, class: d.className,
          left: r.left, width: r.width, top: r.top, visible: hit === d || d.contains(hit)};
})`

func byName(t *testing.T, frames []frameBox, name string) frameBox {
	t.Helper()
	for _, f := range frames {
		if f.Name == name {
			return f
		}
	}
	var names []string
	for _, f := range frames {
		names = append(names, f.Name)
	}
	t.Fatalf("no frame %q drawn; drawn: %v", name, names)
	return frameBox{}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1.5 }

// TestPageInChromium loads a rendered page in headless Chromium from a file (no server: the page
// must need nothing else), and checks what a reader sees: no console error, the named frames
// drawn and visible with their file:line, the inlined frame marked, widths in proportion to the
// samples, a click that zooms a frame to the full width and a click on the root that resets,
// and the search that marks frames and sums their share.
func TestPageInChromium(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a browser")
	}
	bin := chromium(t)
	start := time.Now()
	dir := t.TempDir()
	page := filepath.Join(dir, "flame.html")
	var b bytes.Buffer
	if err := Render(&b, TreeOf(sampleStacks()), Options{Title: "test program"}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(page, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}

	opts := append(slices.Clone(chromedp.DefaultExecAllocatorOptions[:]),
		chromedp.ExecPath(bin),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(filepath.Join(dir, "profile")),
		chromedp.WindowSize(1200, 700),
	)
	// A deadline so that a browser that never answers fails the test instead of hanging it.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()
	ctx, cancelTab := chromedp.NewContext(allocCtx)
	defer cancelTab()

	var mu sync.Mutex
	var console []chromedp.ConsoleMessage
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			mu.Lock()
			console = append(console, m)
			mu.Unlock()
		}
	}()

	// Every request the page makes: the page itself, and nothing else may follow.
	var requests []string
	if err := chromedp.Listen(ctx, func(ev any) {
		if r, ok := ev.(*network.EventRequestWillBeSent); ok {
			mu.Lock()
			requests = append(requests, r.Request.URL)
			mu.Unlock()
		}
	}); err != nil {
		t.Fatal(err)
	}

	frames := func() []frameBox {
		t.Helper()
		fs, err := chromedp.Run(ctx, chromedp.Evaluate[[]frameBox](readFrames))
		if err != nil {
			t.Fatal(err)
		}
		return fs
	}
	if err := chromedp.Do(ctx, chromedp.Navigate("file://"+page), chromedp.WaitVisible(`.frame[data-name="compute"]`)); err != nil {
		t.Fatal(err)
	}

	// As loaded: every named frame drawn, visible, labelled, proportional.
	fs := frames()
	root := byName(t, fs, "all")
	for _, name := range []string{"main", "compute", "square", "write_out", "ksys_write", "libfoo.so+0x1234"} {
		f := byName(t, fs, name)
		if !f.Visible {
			t.Errorf("frame %q is drawn but covered", name)
		}
		if f.Width > 150 && !strings.Contains(f.Text, name) {
			t.Errorf("frame %q (%.0f px) labelled %q", name, f.Width, f.Text)
		}
	}
	compute, square := byName(t, fs, "compute"), byName(t, fs, "square")
	if !strings.Contains(compute.Text, "prog.c:12") || !strings.Contains(square.Text, "math.h:4") {
		t.Errorf("labels without file:line: %q, %q", compute.Text, square.Text)
	}
	if !strings.Contains(square.Class, "inlined") || strings.Contains(compute.Class, "inlined") {
		t.Errorf("classes: square %q, compute %q: only square is inlined", square.Class, compute.Class)
	}
	if !strings.Contains(square.Title, "[inlined]") || !strings.Contains(square.Title, "/src/math.h :4 (60.00%) :5 (20.00%)") {
		t.Errorf("square's tooltip %q does not say inlined and its lines", square.Title)
	}
	if !near(compute.Width, root.Width*0.85) || !near(square.Width, root.Width*0.80) {
		t.Errorf("widths: root %.1f, compute %.1f (want 85%%), square %.1f (want 80%%)", root.Width, compute.Width, square.Width)
	}
	if !(square.Top > compute.Top && compute.Top > root.Top) {
		t.Errorf("rows: root %.0f, compute %.0f, square %.0f: callees below callers", root.Top, compute.Top, square.Top)
	}

	shot, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(shot))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if colors := distinctColors(img); colors < 8 {
		t.Errorf("screenshot has %d colours: the frames were not painted", colors)
	}
	if err := os.WriteFile(filepath.Join(dir, "flame.png"), shot, 0o644); err != nil {
		t.Fatal(err)
	}

	// A click on compute makes it the full width: its inlined callee scales with it, frames
	// outside it go.
	if err := chromedp.Do(ctx, chromedp.Click(`.frame[data-name="compute"]`)); err != nil {
		t.Fatal(err)
	}
	fs = frames()
	compute, square = byName(t, fs, "compute"), byName(t, fs, "square")
	if !near(compute.Width, root.Width) || !near(compute.Left, root.Left) {
		t.Errorf("zoomed compute at %.1f+%.1f, want the root's %.1f+%.1f", compute.Left, compute.Width, root.Left, root.Width)
	}
	if !near(square.Width, root.Width*80/85) {
		t.Errorf("zoomed square %.1f px, want 80/85 of %.1f", square.Width, root.Width)
	}
	for _, f := range fs {
		if f.Name == "write_out" || f.Name == "ksys_write" {
			t.Errorf("frame %q outside the zoomed one still drawn", f.Name)
		}
	}
	if !strings.Contains(byName(t, fs, "main").Class, "ancestor") {
		t.Error("main, above the zoomed frame, is not marked as its ancestor")
	}

	// A click on the root resets.
	if err := chromedp.Do(ctx, chromedp.Click(`.frame[data-name="all"]`)); err != nil {
		t.Fatal(err)
	}
	fs = frames()
	if c := byName(t, fs, "compute"); !near(c.Width, root.Width*0.85) {
		t.Errorf("after reset compute is %.1f px, want 85%% of %.1f", c.Width, root.Width)
	}
	byName(t, fs, "ksys_write")

	// Search: typed as an input event, as a keystroke sends it.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(function () {
  var s = document.getElementById("search");
  s.focus(); s.value = "squ"; s.dispatchEvent(new Event("input", {bubbles: true})); return true;
})()`)); err != nil {
		t.Fatal(err)
	}
	matched, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("matched").textContent`))
	if err != nil {
		t.Fatal(err)
	}
	if matched != "matched: 80.00%" {
		t.Errorf("search shows %q, want matched: 80.00%%", matched)
	}
	fs = frames()
	if !strings.Contains(byName(t, fs, "square").Class, "match") || strings.Contains(byName(t, fs, "compute").Class, "match") {
		t.Error("search marked the wrong frames")
	}

	// The console saw no error; a probe written now proves the messages are being read.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`console.error("probe"), true`)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		got := slices.Clone(console)
		mu.Unlock()
		probe := slices.ContainsFunc(got, func(m chromedp.ConsoleMessage) bool { return m.Text == "probe" })
		if probe || time.Now().After(deadline) {
			if !probe {
				t.Error("the console probe never arrived: console messages are not being read")
			}
			for _, m := range got {
				if m.Text != "probe" && (m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleWarning || m.IsException()) {
					t.Errorf("console: %s", m)
				}
			}
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	if len(requests) != 1 || requests[0] != "file://"+page {
		t.Errorf("the page made requests %v; want only its own load", requests)
	}
	mu.Unlock()
	t.Logf("loaded, checked, zoomed, reset and searched in headless Chromium in %v", time.Since(start).Round(time.Millisecond))
}

func distinctColors(img image.Image) int {
	seen := map[[3]uint32]bool{}
	bnd := img.Bounds()
	for y := bnd.Min.Y; y < bnd.Max.Y; y += 3 {
		for x := bnd.Min.X; x < bnd.Max.X; x += 3 {
			r, g, b, _ := img.At(x, y).RGBA()
			seen[[3]uint32{r >> 8, g >> 8, b >> 8}] = true
		}
	}
	return len(seen)
}
