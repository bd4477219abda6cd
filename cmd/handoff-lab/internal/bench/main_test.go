package bench

import (
	"os"
	"testing"

	"github.com/handoffhq/handoff/internal/proc"
)

func TestMain(m *testing.M) {
	code := m.Run()
	proc.RemoveBuilds() // once: the bench tests share one build, whatever -count
	os.Exit(code)
}
