package scenario

import (
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	code := m.Run()
	RemoveBuilds()
	os.Exit(code)
}

// skipShort skips a scenario under -short: each runs real processes for
// tens of seconds.
func skipShort(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("scenario with real processes; skipped under -short")
	}
}
