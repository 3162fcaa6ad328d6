package ociimage

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
)

// LibDirs are where Debian's dynamic loader finds shared libraries without an ld.so.cache, per
// architecture, in its search order.
var LibDirs = map[string][]string{
	"amd64": {"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib", "/usr/lib"},
	"arm64": {"/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/lib", "/usr/lib"},
}

// SharedLibs returns the program interpreter and every shared library the ELF files need,
// transitively (DT_NEEDED), as found on this machine under root in LibDirs[arch]: each at the
// path the loader opens, its contents those of the file that path resolves to. A library not
// found is an error naming it and the file that needs it. Static files need nothing.
func SharedLibs(root, arch string, files ...string) ([]Entry, error) {
	dirs, ok := LibDirs[arch]
	if !ok {
		return nil, fmt.Errorf("shared libraries: architecture %q not known", arch)
	}
	seen := map[string]bool{}
	var out []Entry
	add := func(inImage string) error {
		if seen[inImage] {
			return nil
		}
		seen[inImage] = true
		real, err := filepath.EvalSymlinks(filepath.Join(root, inImage))
		if err != nil {
			return err
		}
		info, err := os.Stat(real)
		if err != nil {
			return err
		}
		out = append(out, HostFile(inImage, info.Mode().Perm(), real))
		return nil
	}
	queue := append([]string(nil), files...)
	for len(queue) > 0 {
		f := queue[0]
		queue = queue[1:]
		ef, err := elf.Open(f)
		if err != nil {
			return nil, fmt.Errorf("shared libraries of %s: %w", f, err)
		}
		needed, err := ef.ImportedLibraries()
		var interp string
		for _, p := range ef.Progs {
			if p.Type == elf.PT_INTERP {
				b := make([]byte, p.Filesz)
				if _, err := p.ReadAt(b, 0); err == nil {
					interp = string(b[:len(b)-1])
				}
			}
		}
		ef.Close()
		if err != nil {
			return nil, fmt.Errorf("shared libraries of %s: %w", f, err)
		}
		if interp != "" {
			if err := add(interp); err != nil {
				return nil, fmt.Errorf("%s: interpreter: %w", f, err)
			}
		}
		for _, lib := range needed {
			found := ""
			for _, d := range dirs {
				if _, err := os.Stat(filepath.Join(root, d, lib)); err == nil {
					found = filepath.Join(d, lib)
					break
				}
			}
			if found == "" {
				return nil, fmt.Errorf("%s needs %s: not found in %v", f, lib, dirs)
			}
			if !seen[found] {
				if err := add(found); err != nil {
					return nil, err
				}
				queue = append(queue, filepath.Join(root, found))
			}
		}
	}
	return out, nil
}
