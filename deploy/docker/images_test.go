// Package docker_test checks the service images' Dockerfiles where no Docker engine runs: each
// builds for the platform buildx asks for by cross-compiling in a build stage on the builder's
// own platform (no emulation), and that very build (GOOS=linux GOARCH=arm64 CGO_ENABLED=0 go
// build) succeeds for each service. `make images` says plainly when there is no buildx builder.
package docker_test

import (
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/profsym/profsym/pkg/dockerfile"
)

const repoRoot = "../.."

// service is one image: its Dockerfile and where its Go package is built from (the gateway is
// a Go module of its own, built in its directory).
type service struct {
	name, dir, pkg string
}

var services = []service{
	{"symbolizer", ".", "./services/symbolizer"},
	{"collector", ".", "./services/collector"},
	{"gateway", "services/gateway", "."},
}

func parse(t *testing.T, path string) []dockerfile.Instruction {
	t.Helper()
	ins, err := dockerfile.ParseFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return ins
}

var goBuild = regexp.MustCompile(`(^|&&\s*|;\s*)((?:[A-Z_]+=\S+\s+)*)go build\b`)

// TestDockerfilesCrossCompile: every stage that runs go build starts FROM
// --platform=$BUILDPLATFORM, declares TARGETOS and TARGETARCH, and runs go build with
// GOOS=$TARGETOS GOARCH=$TARGETARCH CGO_ENABLED=0; the final stage takes the target platform
// (no --platform), so buildx makes one image per platform from one Dockerfile.
func TestDockerfilesCrossCompile(t *testing.T) {
	for _, s := range services {
		t.Run(s.name, func(t *testing.T) {
			path := filepath.Join(repoRoot, "deploy", "docker", s.name+".Dockerfile")
			ins := parse(t, path)
			type stage struct {
				from     dockerfile.Instruction
				args     map[string]bool
				builds   []string // env assignments of each go build
				copyFrom bool
			}
			var stages []*stage
			for _, in := range ins {
				switch in.Cmd {
				case "FROM":
					stages = append(stages, &stage{from: in, args: map[string]bool{}})
				case "ARG":
					if len(stages) == 0 {
						continue
					}
					for _, a := range strings.Fields(in.Args) {
						name, _, _ := strings.Cut(a, "=")
						stages[len(stages)-1].args[name] = true
					}
				case "RUN":
					for _, m := range goBuild.FindAllStringSubmatch(in.Args, -1) {
						stages[len(stages)-1].builds = append(stages[len(stages)-1].builds, m[2])
					}
				case "COPY":
					if strings.Contains(in.Args, "--from=") {
						stages[len(stages)-1].copyFrom = true
					}
				}
			}
			if len(stages) < 2 {
				t.Fatalf("%s: %d stages, want a build stage and an image stage", path, len(stages))
			}
			builds := 0
			for _, st := range stages {
				if len(st.builds) == 0 {
					continue
				}
				if !strings.HasPrefix(st.from.Args, "--platform=$BUILDPLATFORM ") {
					t.Errorf("%s:%d: a stage that runs go build starts %q: want FROM --platform=$BUILDPLATFORM (cross-compile, no emulation)", path, st.from.Line, "FROM "+st.from.Args)
				}
				for _, a := range []string{"TARGETOS", "TARGETARCH"} {
					if !st.args[a] {
						t.Errorf("%s:%d: the build stage does not declare ARG %s", path, st.from.Line, a)
					}
				}
				for _, env := range st.builds {
					vars := strings.Fields(env)
					for _, want := range []string{"GOOS=$TARGETOS", "GOARCH=$TARGETARCH", "CGO_ENABLED=0"} {
						if !containsWord(vars, want) {
							t.Errorf("%s: go build with %q: want %s", path, env, want)
						}
					}
					builds++
				}
			}
			if builds == 0 {
				t.Fatalf("%s: no go build found", path)
			}
			last := stages[len(stages)-1]
			if strings.HasPrefix(last.from.Args, "--platform") {
				t.Errorf("%s:%d: the image stage pins a platform (%q): it must take the target's", path, last.from.Line, last.from.Args)
			}
			if !last.copyFrom {
				t.Errorf("%s: the image stage copies nothing from the build stage", path)
			}
		})
	}
}

func containsWord(words []string, w string) bool {
	for _, x := range words {
		if x == w {
			return true
		}
	}
	return false
}

// TestServicesBuildForARM64 runs the build each Dockerfile runs for linux/arm64 and checks the
// binary is a static AArch64 executable.
func TestServicesBuildForARM64(t *testing.T) {
	if testing.Short() {
		t.Skip("cross-compiles the three services")
	}
	out := t.TempDir()
	for _, s := range services {
		t.Run(s.name, func(t *testing.T) {
			bin := filepath.Join(out, s.name)
			cmd := exec.CommandContext(t.Context(), "go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, s.pkg)
			cmd.Dir = filepath.Join(repoRoot, s.dir)
			cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH=arm64", "CGO_ENABLED=0", "GOWORK=off")
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("GOOS=linux GOARCH=arm64 CGO_ENABLED=0 go build %s (in %s): %v\n%s", s.pkg, s.dir, err, b)
			}
			f, err := elf.Open(bin)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if f.Machine != elf.EM_AARCH64 || f.Class != elf.ELFCLASS64 {
				t.Fatalf("%s: machine %v class %v, want EM_AARCH64 ELFCLASS64", s.name, f.Machine, f.Class)
			}
			for _, p := range f.Progs {
				if p.Type == elf.PT_INTERP {
					t.Fatalf("%s: has an interpreter (PT_INTERP): not a static binary, a distroless static image cannot run it", s.name)
				}
			}
		})
	}
}

// TestMakeImagesWithoutBuildx: where no buildx builder answers, `make images` says so in one
// line and fails, before building anything.
func TestMakeImagesWithoutBuildx(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skipf("make not installed: %v", err)
	}
	missing := filepath.Join(t.TempDir(), "docker")
	cmd := exec.CommandContext(t.Context(), "make", "-s", "--no-print-directory", "images", "DOCKER="+missing)
	cmd.Dir = repoRoot
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err == nil {
		t.Fatalf("make images with no docker succeeded:\n%s%s", stdout.String(), stderr.String())
	}
	msg := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	if !strings.Contains(msg[0], "make images: no docker buildx builder") {
		t.Fatalf("make images: first line %q, want the plain message", msg[0])
	}
	if stdout.Len() != 0 {
		t.Fatalf("make images printed %q before failing: it started a build", stdout.String())
	}
	// And with a docker whose buildx has a builder, it would build every image for both
	// platforms: what it would run, from make's dry run.
	dryRun := exec.CommandContext(t.Context(), "make", "-n", "--no-print-directory", "images", "DOCKER=docker")
	dryRun.Dir = repoRoot
	dry, err := dryRun.Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"buildx build --platform linux/amd64,linux/arm64", "for s in symbolizer gateway collector", "deploy/docker/$s.Dockerfile"} {
		if !strings.Contains(string(dry), want) {
			t.Errorf("make -n images: no %q in\n%s", want, dry)
		}
	}
}
