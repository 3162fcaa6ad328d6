// Package dockerfile reads the subset of the Dockerfile language that profsym's service images
// use (deploy/docker): instructions with continuation lines joined, the stages they form, the
// final stage as an image description (base, USER, ENTRYPOINT, CMD, ENV, WORKDIR, EXPOSE and
// COPY --from), and the `go build` commands a build stage's RUN lines run. It is what the
// offline image builder (deploy/imagebuild) and the Dockerfiles' tests read the Dockerfiles
// with, so that the Dockerfiles stay the one definition of each image.
//
// Anything in a final stage the offline builder could not reproduce (RUN, ADD, a COPY from the
// build context, a shell-form ENTRYPOINT) is an error naming the line, not silently skipped.
package dockerfile

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
)

// Instruction is one Dockerfile instruction with its continuation lines joined.
type Instruction struct {
	Line int    // the line it starts on, from 1
	Cmd  string // upper case: FROM, RUN, COPY...
	Args string // the rest, trimmed
}

// Parse reads instructions, skipping blank and comment lines and joining lines that end in a
// backslash.
func Parse(r io.Reader) ([]Instruction, error) {
	var out []Instruction
	var cur strings.Builder
	start, n := 0, 0
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if cur.Len() == 0 && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if cur.Len() > 0 && strings.HasPrefix(line, "#") {
			continue // a comment inside a continued instruction
		}
		if cur.Len() == 0 {
			start = n
		}
		if cont, ok := strings.CutSuffix(line, `\`); ok {
			cur.WriteString(cont + " ")
			continue
		}
		cur.WriteString(line)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		out = append(out, Instruction{start, strings.ToUpper(cmd), strings.TrimSpace(args)})
		cur.Reset()
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("line %d: %w", n, err)
	}
	if cur.Len() > 0 {
		return nil, fmt.Errorf("line %d: the file ends inside a continued instruction", start)
	}
	return out, nil
}

// ParseFile parses the Dockerfile at path; errors name the file.
func ParseFile(path string) ([]Instruction, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ins, err := Parse(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return ins, nil
}

// Stage is one FROM and the instructions up to the next.
type Stage struct {
	From         Instruction
	Platform     string // the FROM's --platform=, if any
	Base         string // the image it starts from
	Name         string // the AS name, if any
	Instructions []Instruction
}

// Stages splits instructions into stages. Instructions before the first FROM (global ARGs) are
// returned apart.
func Stages(ins []Instruction) (global []Instruction, stages []Stage, err error) {
	for _, in := range ins {
		if in.Cmd != "FROM" {
			if len(stages) == 0 {
				global = append(global, in)
			} else {
				stages[len(stages)-1].Instructions = append(stages[len(stages)-1].Instructions, in)
			}
			continue
		}
		st := Stage{From: in}
		f := strings.Fields(in.Args)
		for len(f) > 0 && strings.HasPrefix(f[0], "--") {
			if p, ok := strings.CutPrefix(f[0], "--platform="); ok {
				st.Platform = p
			} else {
				return nil, nil, fmt.Errorf("line %d: FROM flag %q not understood", in.Line, f[0])
			}
			f = f[1:]
		}
		switch {
		case len(f) == 1:
			st.Base = f[0]
		case len(f) == 3 && strings.EqualFold(f[1], "AS"):
			st.Base, st.Name = f[0], f[2]
		default:
			return nil, nil, fmt.Errorf("line %d: FROM %q: want FROM [--platform=P] IMAGE [AS NAME]", in.Line, in.Args)
		}
		stages = append(stages, st)
	}
	if len(stages) == 0 {
		return nil, nil, fmt.Errorf("no FROM")
	}
	return global, stages, nil
}

// Lookup returns the stage named name (an AS name or the stage's index).
func Lookup(stages []Stage, name string) (Stage, bool) {
	for i, st := range stages {
		if st.Name == name || fmt.Sprint(i) == name {
			return st, true
		}
	}
	return Stage{}, false
}

// Copy is a COPY --from=STAGE SRC DST of a final stage.
type Copy struct {
	Line     int
	From     string
	Src, Dst string
}

// Image is what a final stage says about the image: its base and its config.
type Image struct {
	Base       string
	User       string
	Entrypoint []string
	Cmd        []string
	Env        []string // KEY=VALUE, in order
	WorkingDir string
	Exposed    []string // "4317/tcp"
	Copies     []Copy
}

// ImageOf reads a final stage. Instructions the offline builder cannot reproduce are errors.
func ImageOf(st Stage) (Image, error) {
	im := Image{Base: st.Base}
	for _, in := range st.Instructions {
		switch in.Cmd {
		case "USER":
			im.User = in.Args
		case "ENTRYPOINT", "CMD":
			var v []string
			if err := json.Unmarshal([]byte(in.Args), &v); err != nil {
				return Image{}, fmt.Errorf("line %d: %s %s: only the exec (JSON) form is supported, the base has no shell: %w", in.Line, in.Cmd, in.Args, err)
			}
			if in.Cmd == "ENTRYPOINT" {
				im.Entrypoint = v
			} else {
				im.Cmd = v
			}
		case "ENV":
			kv, err := envPairs(in)
			if err != nil {
				return Image{}, err
			}
			im.Env = append(im.Env, kv...)
		case "WORKDIR":
			im.WorkingDir = in.Args
		case "EXPOSE":
			for _, p := range strings.Fields(in.Args) {
				if !strings.Contains(p, "/") {
					p += "/tcp"
				}
				im.Exposed = append(im.Exposed, p)
			}
		case "COPY":
			f := strings.Fields(in.Args)
			var from string
			for len(f) > 0 && strings.HasPrefix(f[0], "--") {
				if v, ok := strings.CutPrefix(f[0], "--from="); ok {
					from = v
				} else {
					return Image{}, fmt.Errorf("line %d: COPY flag %q not supported by the offline builder", in.Line, f[0])
				}
				f = f[1:]
			}
			if from == "" || len(f) != 2 {
				return Image{}, fmt.Errorf("line %d: COPY %s: the offline builder supports COPY --from=STAGE SRC DST only", in.Line, in.Args)
			}
			im.Copies = append(im.Copies, Copy{in.Line, from, f[0], f[1]})
		case "LABEL", "ARG":
			// Labels and ARGs change no file and no config the runtime reads.
		default:
			return Image{}, fmt.Errorf("line %d: %s in the final stage: not supported by the offline builder (deploy/imagebuild)", in.Line, in.Cmd)
		}
	}
	return im, nil
}

func envPairs(in Instruction) ([]string, error) {
	// ENV KEY=VALUE [KEY=VALUE...] with optional double quotes, or the old ENV KEY VALUE.
	if k, v, ok := strings.Cut(in.Args, " "); ok && !strings.Contains(k, "=") {
		return []string{k + "=" + strings.TrimSpace(v)}, nil
	}
	var out []string
	for _, f := range strings.Fields(in.Args) {
		k, v, ok := strings.Cut(f, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("line %d: ENV %s: want KEY=VALUE", in.Line, in.Args)
		}
		out = append(out, k+"="+strings.Trim(v, `"`))
	}
	return out, nil
}
