package cluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// cgroupV1Root is where the cgroup v1 hierarchies are mounted (one directory each).
const cgroupV1Root = "/sys/fs/cgroup"

// cgroupHierarchies lists the mounted cgroup hierarchies (v1 controllers, the named systemd
// one, the v2 one of a hybrid setup), each once.
func cgroupHierarchies() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var dirs []string
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		// The filesystem type follows the "-" separator.
		for i, fld := range fields {
			if fld == "-" && i+1 < len(fields) && (fields[i+1] == "cgroup" || fields[i+1] == "cgroup2") && len(fields) > 4 {
				if (strings.HasPrefix(fields[4], cgroupV1Root+"/") || fields[4] == cgroupV1Root) && !seen[fields[4]] {
					seen[fields[4]] = true
					dirs = append(dirs, fields[4])
				}
			}
		}
	}
	return dirs, sc.Err()
}

// createCgroupRoot creates the cgroup the kubelet puts its pods under, in every hierarchy
// (the kubelet's cgroupfs driver requires its cgroupRoot to exist), with the CPU weight of
// podsCPUShares.
func createCgroupRoot(root string) error {
	dirs, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	for _, d := range dirs {
		dir := filepath.Join(d, root)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("cgroup %s: %w", dir, err)
		}
		for file, value := range map[string]string{"cpu.shares": strconv.Itoa(podsCPUShares), "cpu.weight": strconv.Itoa(podsCPUShares * 100 / 1024)} {
			f := filepath.Join(dir, file)
			if _, err := os.Stat(f); err != nil {
				continue // not the cpu controller's hierarchy, or not this version's file
			}
			if err := os.WriteFile(f, []byte(value), 0o644); err != nil {
				return fmt.Errorf("cgroup %s: %w", f, err)
			}
		}
	}
	return nil
}

// podsCPUShares is the CPU weight (cgroup v1 cpu.shares; v2 cpu.weight in proportion) of the
// cgroup all the cluster's pods run under, against the machine's other processes. A node gives
// its pods the weight of its CPUs and leaves few busy processes beside them; a test machine
// runs the cluster's daemons and the other tests' processes beside it, and with the kernel's
// autogroups each session (every daemon started with setsid) weighs as much as the default
// 1024 of the whole cluster. A workload pod then got a sliver of its CPU limit (seen: the
// OpenTelemetry profiler test's Python pod sampled at a fortieth of its rate for minutes while
// another cluster and the kernel matrix ran; with six busy sessions beside it a pod limited to
// 500m had 2.3 s of CPU in 10 s at 1024, 5.0 s at 8192): pods weigh as eight busy sessions.
const podsCPUShares = 8192

// Down takes the cluster down completely: the kubelet first (so it restarts nothing), then
// every container and sandbox through containerd, then the other daemons (each by its process
// group), any process left in the pods' cgroups or a shim of this containerd, every mount under
// Dir (containers' root filesystems, the kubelet's volumes, the pods' network namespaces), the
// network namespace (its interfaces, routes and iptables rules go with it), the pods' cgroups
// and Dir itself. It goes on past errors and returns them all, and then what it finds left.
func (c *Cluster) Down(ctx context.Context) error {
	var errs []error
	c.stopProc("kubelet")
	if c.procRunning("containerd") {
		if err := c.removeContainers(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	for i := len(c.Procs) - 1; i >= 0; i-- {
		c.stopProc(c.Procs[i].Name)
	}
	if err := c.killStragglers(); err != nil {
		errs = append(errs, err)
	}
	if err := unmountUnder(c.Dir); err != nil {
		errs = append(errs, err)
	}
	if err := deleteNetns(ctx, c.Name); err != nil {
		errs = append(errs, err)
	}
	if err := removeCgroups(c.CgroupRoot); err != nil {
		errs = append(errs, err)
	}
	// Containerd keeps CNI results in libcni's default cache directory, which its 1.6
	// configuration cannot move.
	if c.CNINetwork != "" {
		results, _ := filepath.Glob(filepath.Join("/var/lib/cni/results", c.CNINetwork+"-*"))
		for _, r := range results {
			if err := os.Remove(r); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := os.RemoveAll(c.Dir); err != nil {
		errs = append(errs, fmt.Errorf("remove %s: %w", c.Dir, err))
	}
	if left := c.Leftovers(); len(left) > 0 {
		errs = append(errs, fmt.Errorf("left after taking the cluster down: %s", strings.Join(left, "; ")))
	}
	c.log.Info("cluster down", "name", c.Name, "errors", len(errs))
	return errors.Join(errs...)
}

// Leftovers lists what of the cluster is still there: processes, mounts under Dir, the network
// namespace, the pods' cgroups, Dir, CNI results.
func (c *Cluster) Leftovers() []string {
	var left []string
	for _, p := range c.Procs {
		if c.running(p) {
			left = append(left, fmt.Sprintf("process %s (pid %d)", p.Name, p.PID))
		}
	}
	if pids, _ := c.strayPIDs(); len(pids) > 0 {
		left = append(left, fmt.Sprintf("processes %v", pids))
	}
	if mounts, _ := mountsUnder(c.Dir); len(mounts) > 0 {
		left = append(left, "mounts "+strings.Join(mounts, ", "))
	}
	if _, err := os.Stat(c.NetnsPath); err == nil {
		left = append(left, "network namespace "+c.NetnsPath)
	}
	if c.CgroupRoot != "" {
		if dirs, _ := cgroupHierarchies(); len(dirs) > 0 {
			for _, d := range dirs {
				if _, err := os.Stat(filepath.Join(d, c.CgroupRoot)); err == nil {
					left = append(left, "cgroup "+filepath.Join(d, c.CgroupRoot))
				}
			}
		}
	}
	if _, err := os.Stat(c.Dir); err == nil {
		left = append(left, "directory "+c.Dir)
	}
	if c.CNINetwork != "" {
		if results, _ := filepath.Glob(filepath.Join("/var/lib/cni/results", c.CNINetwork+"-*")); len(results) > 0 {
			left = append(left, "CNI results "+strings.Join(results, ", "))
		}
	}
	return left
}

func (c *Cluster) procRunning(name string) bool {
	for _, p := range c.Procs {
		if p.Name == name {
			return c.running(p)
		}
	}
	return false
}

// stopProc stops the named daemon's process group: SIGTERM, then SIGKILL after a grace period.
func (c *Cluster) stopProc(name string) {
	for _, p := range c.Procs {
		if p.Name != name || !c.running(p) {
			continue
		}
		_ = syscall.Kill(-p.PID, syscall.SIGTERM)
		deadline := time.Now().Add(15 * time.Second)
		for time.Now().Before(deadline) && c.running(p) {
			time.Sleep(100 * time.Millisecond)
		}
		_ = syscall.Kill(-p.PID, syscall.SIGKILL)
		for i := 0; i < 50 && c.running(p); i++ {
			time.Sleep(100 * time.Millisecond)
		}
		c.log.Info("stopped", "daemon", name, "pid", p.PID)
	}
}

// removeContainers kills and deletes every task and container of containerd's k8s.io
// namespace (the pods' containers and sandboxes), so that their shims exit and unmount their
// root filesystems.
func (c *Cluster) removeContainers(ctx context.Context) error {
	ctr := c.tools["ctr"]
	if ctr == "" {
		var err error
		if ctr, err = lookPath("ctr"); err != nil {
			return err
		}
	}
	run := func(args ...string) (string, error) {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(cctx, ctr, append([]string{"--address", c.ContainerdSocket, "--namespace", "k8s.io"}, args...)...).CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
		return string(out), nil
	}
	out, err := run("containers", "list", "--quiet")
	if err != nil {
		return err
	}
	var errs []error
	for _, id := range strings.Fields(out) {
		// A container without a task, or whose task has exited already, answers an error here.
		_, _ = run("tasks", "kill", "--signal", "SIGKILL", id)
		_, _ = run("tasks", "delete", "--force", id)
		if _, err := run("containers", "delete", id); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// strayPIDs finds processes of the cluster that no Proc records: anything in the pods'
// cgroups (containers), and containerd's shims (their command line names this cluster's
// containerd socket).
func (c *Cluster) strayPIDs() ([]int, error) {
	seen := map[int]bool{}
	if c.CgroupRoot != "" {
		dirs, err := cgroupHierarchies()
		if err != nil {
			return nil, err
		}
		for _, d := range dirs {
			_ = filepath.WalkDir(filepath.Join(d, c.CgroupRoot), func(path string, e os.DirEntry, err error) error {
				if err != nil {
					// A cgroup removed while it is walked, or no tree in this hierarchy.
					return nil //nolint:nilerr // nothing to find there
				}
				if e.IsDir() || e.Name() != "cgroup.procs" {
					return nil
				}
				data, _ := os.ReadFile(path)
				for _, f := range strings.Fields(string(data)) {
					if pid, err := strconv.Atoi(f); err == nil {
						seen[pid] = true
					}
				}
				return nil
			})
		}
	}
	if c.ContainerdSocket != "" {
		entries, err := os.ReadDir("/proc")
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			if err != nil {
				continue
			}
			args := strings.Split(string(cmdline), "\x00")
			if len(args) > 0 && strings.HasPrefix(filepath.Base(args[0]), "containerd-shim") && strings.Contains(string(cmdline), c.ContainerdSocket) {
				seen[pid] = true
			}
		}
	}
	pids := make([]int, 0, len(seen))
	for pid := range seen {
		pids = append(pids, pid)
	}
	sort.Ints(pids)
	return pids, nil
}

// killStragglers SIGKILLs what strayPIDs finds until nothing is left, for up to 10 seconds.
func (c *Cluster) killStragglers() error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids, err := c.strayPIDs()
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v survive SIGKILL", pids)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// mountsUnder lists the mount points at or below dir, deepest first.
func mountsUnder(dir string) ([]string, error) {
	if dir == "" {
		return nil, nil
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var mounts []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		// Octal escapes (\040 for a space) are left as they are: the cluster's paths have none.
		mp := fields[4]
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			mounts = append(mounts, mp)
		}
	}
	sort.Slice(mounts, func(i, j int) bool { return len(mounts[i]) > len(mounts[j]) })
	return mounts, sc.Err()
}

// unmountUnder unmounts everything at or below dir, deepest first, until nothing is left (a
// path can carry stacked mounts).
func unmountUnder(dir string) error {
	for range 10 {
		mounts, err := mountsUnder(dir)
		if err != nil {
			return err
		}
		if len(mounts) == 0 {
			return nil
		}
		for _, m := range mounts {
			_ = unix.Unmount(m, unix.MNT_DETACH)
		}
	}
	mounts, _ := mountsUnder(dir)
	if len(mounts) > 0 {
		return fmt.Errorf("still mounted: %s", strings.Join(mounts, ", "))
	}
	return nil
}

// removeCgroups removes the cgroup tree at root in every hierarchy, deepest first (a cgroup
// directory is removed with rmdir once it has no process and no child).
func removeCgroups(root string) error {
	if root == "" || root == "/" {
		return nil
	}
	dirs, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range dirs {
		top := filepath.Join(d, root)
		var tree []string
		_ = filepath.WalkDir(top, func(path string, e os.DirEntry, err error) error {
			if err == nil && e.IsDir() {
				tree = append(tree, path)
			}
			return nil
		})
		sort.Slice(tree, func(i, j int) bool { return len(tree[i]) > len(tree[j]) })
		for _, t := range tree {
			var err error
			for range 20 {
				if err = unix.Rmdir(t); err == nil || errors.Is(err, unix.ENOENT) {
					err = nil
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("rmdir %s: %w", t, err))
			}
		}
	}
	return errors.Join(errs...)
}
