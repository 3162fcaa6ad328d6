package dockerfile

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func mustImage(t *testing.T, src string) (Image, error) {
	t.Helper()
	ins, err := Parse(strings.NewReader(src))
	if err != nil {
		t.Fatal(err)
	}
	_, stages, err := Stages(ins)
	if err != nil {
		t.Fatal(err)
	}
	return ImageOf(stages[len(stages)-1])
}

func TestImageOf(t *testing.T) {
	im, err := mustImage(t, `FROM golang AS build
RUN go build -o /out/x .
FROM base:1
# a comment
COPY --from=build /out/x /usr/local/bin/x
USER 65532:65532
ENV A=1 B="two"
ENV C 3 4
WORKDIR /w
EXPOSE 4317 8888/udp
ENTRYPOINT ["/usr/local/bin/x", \
  "--flag"]
CMD ["serve"]
`)
	if err != nil {
		t.Fatal(err)
	}
	want := Image{
		Base: "base:1", User: "65532:65532", Entrypoint: []string{"/usr/local/bin/x", "--flag"}, Cmd: []string{"serve"},
		Env: []string{"A=1", "B=two", "C=3 4"}, WorkingDir: "/w", Exposed: []string{"4317/tcp", "8888/udp"},
		Copies: []Copy{{Line: 5, From: "build", Src: "/out/x", Dst: "/usr/local/bin/x"}},
	}
	if !reflect.DeepEqual(im, want) {
		t.Fatalf("got  %+v\nwant %+v", im, want)
	}
}

// A final stage the offline builder cannot reproduce is an error naming the line.
func TestImageOfRejects(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{"FROM b\nRUN apt-get install x\n", "line 2: RUN in the final stage"},
		{"FROM b\nADD x.tar /\n", "line 2: ADD in the final stage"},
		{"FROM b\nCOPY x /x\n", "COPY --from=STAGE SRC DST only"},
		{"FROM b\nCOPY --chown=1 --from=a /x /x\n", `COPY flag "--chown=1"`},
		{"FROM b\nENTRYPOINT /bin/x --y\n", "only the exec (JSON) form"},
		{"FROM b\nSHELL [\"/bin/sh\"]\n", "SHELL in the final stage"},
	} {
		_, err := mustImage(t, c.src)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want %q", c.src, err, c.want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	if _, err := Parse(strings.NewReader("FROM a\nRUN x \\\n")); err == nil || !strings.Contains(err.Error(), "ends inside a continued instruction") {
		t.Errorf("unterminated continuation: %v", err)
	}
	if _, _, err := Stages([]Instruction{{1, "RUN", "x"}}); err == nil {
		t.Error("no FROM: no error")
	}
	if _, _, err := Stages([]Instruction{{1, "FROM", "--pull a"}}); err == nil || !strings.Contains(err.Error(), `"--pull"`) {
		t.Errorf("unknown FROM flag: %v", err)
	}
}

func TestGoBuilds(t *testing.T) {
	ins, err := Parse(strings.NewReader(`ARG GLOBAL=g
FROM --platform=$BUILDPLATFORM golang AS build
ARG TARGETOS TARGETARCH
WORKDIR /src
RUN go mod download
COPY . .
ARG VERSION=dev
RUN cd services/gw && GOOS=$TARGETOS GOARCH=$TARGETARCH CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -X main.version=${VERSION}-${GLOBAL}" -o /out/gw .
RUN GOARCH=$TARGETARCH go build -o=bin/tool ./cmd/tool
FROM scratch
`))
	if err != nil {
		t.Fatal(err)
	}
	global, stages, err := Stages(ins)
	if err != nil {
		t.Fatal(err)
	}
	if stages[0].Platform != "$BUILDPLATFORM" || stages[0].Name != "build" || stages[0].Base != "golang" {
		t.Fatalf("stage: %+v", stages[0])
	}
	got, err := GoBuilds(global, stages[0], map[string]string{"TARGETOS": "linux", "TARGETARCH": "arm64"})
	if err != nil {
		t.Fatal(err)
	}
	want := []GoBuild{
		{Line: 8, Dir: "services/gw", Env: []string{"GOOS=linux", "GOARCH=arm64", "CGO_ENABLED=0"},
			Args: []string{"build", "-trimpath", "-ldflags=-s -w -X main.version=dev-g", "-o", "/out/gw", "."}, Output: "/out/gw"},
		{Line: 9, Dir: ".", Env: []string{"GOARCH=arm64"}, Args: []string{"build", "-o=bin/tool", "./cmd/tool"}, Output: "/src/bin/tool"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
	// An ARG with no value is an error, not an empty string in the build.
	if _, err := GoBuilds(global, stages[0], map[string]string{"TARGETOS": "linux"}); err == nil || !strings.Contains(err.Error(), "TARGETARCH") {
		t.Errorf("unset TARGETARCH: %v", err)
	}
}

func TestGoBuildsRejects(t *testing.T) {
	for _, c := range []struct{ run, want string }{
		{"go build -o /out/x . || true", "only && chains"},
		{"rm -rf x && go build -o /out/x .", `"rm -rf x" beside go build`},
		{"go build .", "without -o"},
		{"cd /elsewhere && go build -o /out/x .", "outside the build context"},
	} {
		ins, err := Parse(strings.NewReader("FROM golang AS build\nWORKDIR /src\nCOPY . .\nRUN " + c.run + "\n"))
		if err != nil {
			t.Fatal(err)
		}
		global, stages, err := Stages(ins)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := GoBuilds(global, stages[0], nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("RUN %s: error %v, want %q", c.run, err, c.want)
		}
	}
}

// The service Dockerfiles read without error, each with one go build whose output the final
// stage copies.
func TestServiceDockerfiles(t *testing.T) {
	for _, s := range []string{"symbolizer", "gateway", "collector"} {
		ins, err := ParseFile(filepath.Join("..", "..", "deploy", "docker", s+".Dockerfile"))
		if err != nil {
			t.Fatal(err)
		}
		global, stages, err := Stages(ins)
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		im, err := ImageOf(stages[len(stages)-1])
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		if len(im.Copies) != 1 {
			t.Fatalf("%s: copies %+v", s, im.Copies)
		}
		st, ok := Lookup(stages, im.Copies[0].From)
		if !ok {
			t.Fatalf("%s: no stage %q", s, im.Copies[0].From)
		}
		gbs, err := GoBuilds(global, st, map[string]string{"TARGETOS": "linux", "TARGETARCH": "amd64"})
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		if len(gbs) != 1 || gbs[0].Output != im.Copies[0].Src {
			t.Fatalf("%s: go builds %+v, the final stage copies %s", s, gbs, im.Copies[0].Src)
		}
	}
}
