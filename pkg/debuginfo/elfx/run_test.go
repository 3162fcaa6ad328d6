package elfx

import "os/exec"

func runOK(name string, args ...string) bool {
	return exec.Command(name, args...).Run() == nil
}
