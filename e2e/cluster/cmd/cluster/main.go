//go:build linux

// Command cluster brings profsym's single-node test cluster (package e2e/cluster) up or
// takes it down, for a person at a shell (make cluster-up, make cluster-down):
//
//	cluster up [-dir DIR] [-name NAME]   bring it up; its daemons keep running after this exits
//	cluster down [-dir DIR]              take it down completely
//	cluster kubectl [-dir DIR] -- ARGS   kubectl inside the cluster's network namespace
//	cluster env [-dir DIR]               print how to reach it from a shell
//
// It needs root. DIR defaults to $TMPDIR/profsym-cluster; NAME, the network namespace's, to
// profsym-cluster.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/profsym/profsym/e2e/cluster"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return errors.New("usage: cluster up|down|kubectl|env [-dir DIR] [-name NAME]")
	}
	cmd := args[0]
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	dir := fs.String("dir", filepath.Join(os.TempDir(), "profsym-cluster"), "the cluster's directory")
	name := fs.String("name", "profsym-cluster", "the network namespace's name (up only)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch cmd {
	case "up":
		start := time.Now()
		c, err := cluster.Up(ctx, cluster.Config{Dir: *dir, Name: *name, Logger: log})
		if err != nil {
			return err
		}
		fmt.Printf("cluster up in %v\n", time.Since(start).Round(100*time.Millisecond))
		printEnv(c)
		return nil
	case "down":
		c, err := cluster.Load(*dir)
		if err != nil {
			return err
		}
		c.SetLogger(log)
		start := time.Now()
		if err := c.Down(ctx); err != nil {
			return err
		}
		fmt.Printf("cluster down in %v\n", time.Since(start).Round(100*time.Millisecond))
		return nil
	case "kubectl":
		c, err := cluster.Load(*dir)
		if err != nil {
			return err
		}
		out, err := c.Kubectl(ctx, nil, fs.Args()...)
		if _, werr := os.Stdout.Write(out); werr != nil && err == nil {
			err = werr
		}
		return err
	case "env":
		c, err := cluster.Load(*dir)
		if err != nil {
			return err
		}
		printEnv(c)
		return nil
	default:
		return fmt.Errorf("unknown command %q (up, down, kubectl, env)", cmd)
	}
}

func printEnv(c *cluster.Cluster) {
	fmt.Printf(`network namespace: %s
kubeconfig:        %s (server %s, reachable inside the namespace only)
containerd:        %s (images in namespace k8s.io)
kubectl:           ip netns exec %s kubectl --kubeconfig %s get pods -A
import an image:   ctr --address %s -n k8s.io images import IMAGE.tar
logs:              %s
`, c.Name, c.Kubeconfig, c.APIServer, c.ContainerdSocket, c.Name, c.Kubeconfig, c.ContainerdSocket, filepath.Join(c.Dir, "logs"))
}
