package ociimage

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// DistrolessStatic is the name of the base the service Dockerfiles start from, for which
// StaticBase is the offline stand-in.
const DistrolessStatic = "gcr.io/distroless/static-debian12:nonroot"

// NonRoot is the user and group distroless's nonroot variant runs as.
const NonRoot = 65532

// BaseConfig is the config the distroless static nonroot image carries and StaticBase's images
// start from.
var BaseConfig = struct {
	Env        []string
	User       string
	WorkingDir string
}{
	Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"},
	User:       fmt.Sprint(NonRoot),
	WorkingDir: "/home/nonroot",
}

const passwd = `root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
`

const group = `root:x:0:
tty:x:5:
staff:x:50:
nobody:x:65534:
nonroot:x:65532:
`

const nsswitch = `passwd:         files
group:          files
shadow:         files
gshadow:        files
hosts:          files dns
networks:       files
protocols:      db files
services:       db files
ethers:         db files
rpc:            db files
`

// BasePackages are the Debian packages whose files StaticBase takes from this machine, as
// distroless static takes them from Debian 12.
var BasePackages = []string{"base-files", "ca-certificates", "netbase", "tzdata"}

// StaticBase returns the files of the offline stand-in for distroless/static-debian12:nonroot,
// read from this machine (root is "/" but for tests): the users and groups root, nobody and
// nonroot (65532) in /etc/passwd and /etc/group, /home/nonroot (0700, 65532) and /root (0700),
// /tmp (1777), the CA bundle of ca-certificates (/etc/ssl/certs/ca-certificates.crt), the time
// zones of tzdata (/usr/share/zoneinfo), /etc/services and /etc/protocols of netbase,
// /etc/os-release of base-files, and /etc/nsswitch.conf. Each is an error when missing: an
// image without its CA bundle or zones would fail only at run time.
func StaticBase(root string) ([]Entry, error) {
	host := func(p string) string { return filepath.Join(root, p) }
	osRelease, err := os.ReadFile(host("/etc/os-release"))
	if err != nil {
		return nil, fmt.Errorf("base: os-release (Debian package base-files): %w", err)
	}
	var rel bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(osRelease))
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "PRETTY_NAME=") {
			rel.WriteString(`PRETTY_NAME="Distroless"` + "\n")
			continue
		}
		rel.WriteString(sc.Text() + "\n")
	}
	es := []Entry{
		Dir("/etc", 0o755),
		File("/etc/passwd", 0o644, passwd),
		File("/etc/group", 0o644, group),
		File("/etc/nsswitch.conf", 0o644, nsswitch),
		File("/etc/os-release", 0o644, rel.String()),
		{Path: "/home/nonroot", Mode: fs.ModeDir | 0o700, UID: NonRoot, GID: NonRoot},
		Dir("/root", 0o700),
		{Path: "/tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777},
		Dir("/usr/local/bin", 0o755),
		Dir("/var", 0o755),
	}
	for _, f := range []struct{ path, pkg string }{
		{"/etc/ssl/certs/ca-certificates.crt", "ca-certificates"},
		{"/etc/services", "netbase"},
		{"/etc/protocols", "netbase"},
	} {
		if _, err := os.Stat(host(f.path)); err != nil {
			return nil, fmt.Errorf("base: %s (Debian package %s): %w", f.path, f.pkg, err)
		}
		es = append(es, HostFile(f.path, 0o644, host(f.path)))
	}
	zones, err := Tree(host("/usr/share/zoneinfo"), "/usr/share/zoneinfo")
	if err != nil {
		return nil, fmt.Errorf("base: time zones (Debian package tzdata): %w", err)
	}
	if len(zones) < 100 {
		return nil, fmt.Errorf("base: %d files under /usr/share/zoneinfo: tzdata is not installed", len(zones))
	}
	return append(es, zones...), nil
}

// Tree returns the files, directories and symbolic links under src as entries under dst,
// owned by root, with their permission bits.
func Tree(src, dst string) ([]Entry, error) {
	var es []Entry
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.ToSlash(filepath.Join(dst, rel))
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			es = append(es, Dir(target, info.Mode().Perm()))
		case d.Type()&fs.ModeSymlink != 0:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			es = append(es, Symlink(target, l))
		case d.Type().IsRegular():
			es = append(es, HostFile(target, info.Mode().Perm(), p))
		default:
			return fmt.Errorf("%s: %v is neither a file, a directory nor a link", p, d.Type())
		}
		return nil
	})
	return es, err
}

// PackageVersions returns "name=version" of the installed Debian packages, as dpkg-query reports
// them, to record in an image's labels what its files came from.
func PackageVersions(ctx context.Context, pkgs ...string) (string, error) {
	out, err := exec.CommandContext(ctx, "dpkg-query", append([]string{"-W", "-f=${Package}=${Version} "}, pkgs...)...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("dpkg-query %v: %w: %s", pkgs, err, ee.Stderr)
		}
		return "", fmt.Errorf("dpkg-query %v: %w", pkgs, err)
	}
	return strings.TrimSpace(string(out)), nil
}
