package snapshot

import "time"

// SetListTimeout sets the bound of one listing and returns a function that
// restores it.
func SetListTimeout(d time.Duration) func() {
	prev := listTimeout
	listTimeout = d
	return func() { listTimeout = prev }
}
