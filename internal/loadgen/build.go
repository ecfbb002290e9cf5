package loadgen

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
)

// Build builds cmd/server and cmd/migrate of the module at root into dir
// and returns a Setup naming them.
func Build(ctx context.Context, root, dir string) (Setup, error) {
	s := Setup{ServerBin: filepath.Join(dir, "server"), MigrateBin: filepath.Join(dir, "migrate")}
	for out, pkg := range map[string]string{s.ServerBin: "./cmd/server", s.MigrateBin: "./cmd/migrate"} {
		cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
		cmd.Dir = root
		if b, err := cmd.CombinedOutput(); err != nil {
			return s, fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
		}
	}
	return s, nil
}
