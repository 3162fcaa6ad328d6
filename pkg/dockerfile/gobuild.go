package dockerfile

import (
	"fmt"
	"path"
	"strings"

	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/syntax"
)

// GoBuild is one `go build` a build stage's RUN runs, with the stage's ARGs expanded.
type GoBuild struct {
	Line int
	// Dir is the directory it runs in, relative to the build context (the stage's `COPY . .`
	// target): "." or "services/gateway".
	Dir string
	// Env is the command's own assignments (GOOS=linux ...), in order.
	Env []string
	// Args follow "go": "build", "-trimpath", ..., the package.
	Args []string
	// Output is the -o path inside the build stage (/out/gateway).
	Output string
}

// GoBuilds returns the go build commands of a build stage, in order, with ARGs expanded from
// args (TARGETOS, TARGETARCH, ...) over the stage's and the global ARG defaults. A RUN that runs
// go build may only chain `cd DIR` and `go build` with &&: anything else there is an error, as
// is an ARG with no value. RUN lines without go build (go mod download) are not returned.
func GoBuilds(global []Instruction, st Stage, args map[string]string) ([]GoBuild, error) {
	vals := map[string]string{}
	declare := func(in Instruction) {
		for _, a := range strings.Fields(in.Args) {
			name, def, hasDef := strings.Cut(a, "=")
			if v, ok := args[name]; ok {
				vals[name] = v
			} else if hasDef {
				vals[name] = strings.Trim(def, `"`)
			}
		}
	}
	for _, in := range global {
		if in.Cmd == "ARG" {
			declare(in)
		}
	}
	workdir, ctxDir := "/", ""
	var out []GoBuild
	for _, in := range st.Instructions {
		switch in.Cmd {
		case "ARG":
			declare(in)
		case "WORKDIR":
			if path.IsAbs(in.Args) {
				workdir = path.Clean(in.Args)
			} else {
				workdir = path.Join(workdir, in.Args)
			}
		case "COPY":
			if f := strings.Fields(in.Args); len(f) == 2 && f[0] == "." {
				ctxDir = path.Join(workdir, f[1])
			}
		case "RUN":
			if !strings.Contains(in.Args, "go build") {
				continue
			}
			if ctxDir == "" {
				return nil, fmt.Errorf("line %d: go build before the stage copies the build context (COPY . DIR)", in.Line)
			}
			b, err := goBuildsOf(in, vals, workdir, ctxDir)
			if err != nil {
				return nil, err
			}
			out = append(out, b...)
		}
	}
	return out, nil
}

func goBuildsOf(in Instruction, vals map[string]string, workdir, ctxDir string) ([]GoBuild, error) {
	file, err := syntax.NewParser().Parse(strings.NewReader(in.Args), "")
	if err != nil {
		return nil, fmt.Errorf("line %d: RUN: %w", in.Line, err)
	}
	var env []string
	for k, v := range vals {
		env = append(env, k+"="+v)
	}
	cfg := &expand.Config{Env: expand.ListEnviron(env...), NoUnset: true}
	var calls []*syntax.CallExpr
	var flatten func(c syntax.Command) error
	flatten = func(c syntax.Command) error {
		switch c := c.(type) {
		case *syntax.BinaryCmd:
			if c.Op != syntax.AndStmt {
				return fmt.Errorf("operator %s: only && chains are supported", c.Op)
			}
			if err := flatten(c.X.Cmd); err != nil {
				return err
			}
			return flatten(c.Y.Cmd)
		case *syntax.CallExpr:
			calls = append(calls, c)
			return nil
		default:
			return fmt.Errorf("%T: only simple commands chained with && are supported", c)
		}
	}
	for _, s := range file.Stmts {
		if err := flatten(s.Cmd); err != nil {
			return nil, fmt.Errorf("line %d: RUN %s: %w", in.Line, in.Args, err)
		}
	}
	dir := workdir
	var out []GoBuild
	for _, c := range calls {
		words, err := expand.Fields(cfg, c.Args...)
		if err != nil {
			return nil, fmt.Errorf("line %d: RUN: %w", in.Line, err)
		}
		var assigns []string
		for _, a := range c.Assigns {
			v := ""
			if a.Value != nil {
				if v, err = expand.Literal(cfg, a.Value); err != nil {
					return nil, fmt.Errorf("line %d: RUN: %s: %w", in.Line, a.Name.Value, err)
				}
			}
			assigns = append(assigns, a.Name.Value+"="+v)
		}
		switch {
		case len(words) == 2 && words[0] == "cd" && len(assigns) == 0:
			if path.IsAbs(words[1]) {
				dir = path.Clean(words[1])
			} else {
				dir = path.Join(dir, words[1])
			}
		case len(words) >= 2 && words[0] == "go" && words[1] == "build":
			rel := strings.TrimPrefix(strings.TrimPrefix(dir, ctxDir), "/")
			if dir != ctxDir && !strings.HasPrefix(dir, ctxDir+"/") {
				return nil, fmt.Errorf("line %d: go build in %s, outside the build context copied to %s", in.Line, dir, ctxDir)
			}
			if rel == "" {
				rel = "."
			}
			b := GoBuild{Line: in.Line, Dir: rel, Env: assigns, Args: words[1:]}
			for i, w := range b.Args {
				o, ok := strings.CutPrefix(w, "-o=")
				if w == "-o" && i+1 < len(b.Args) {
					o, ok = b.Args[i+1], true
				}
				if ok {
					b.Output = o
					if !path.IsAbs(o) {
						b.Output = path.Join(dir, o)
					}
				}
			}
			if b.Output == "" {
				return nil, fmt.Errorf("line %d: go build without -o: the builder cannot tell which file the stage makes", in.Line)
			}
			out = append(out, b)
		default:
			return nil, fmt.Errorf("line %d: RUN: %q beside go build: only `cd DIR` and `go build` are supported by the offline builder", in.Line, strings.Join(words, " "))
		}
	}
	return out, nil
}
