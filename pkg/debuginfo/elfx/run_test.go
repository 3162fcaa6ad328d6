package elfx

import (
	"context"
	"os/exec"
)

func runOK(ctx context.Context, name string, args ...string) bool {
	return exec.CommandContext(ctx, name, args...).Run() == nil
}
