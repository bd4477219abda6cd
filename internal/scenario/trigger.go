package scenario

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/handoffhq/handoff/httpapi"
)

// Trigger fires a fault the moment the group reaches a state, however
// briefly it lasts: it re-reads the group's view at every change of the
// group's KV bucket, from its own goroutine, while the test goes on (say,
// starting the member whose arrival causes the state).
type Trigger struct {
	what   string
	done   chan struct{}
	cancel context.CancelFunc

	gv  httpapi.GroupView
	err error // the condition's last error, until it held
}

// OnGroup starts watching the group and calls fire(gv), from the trigger's
// goroutine, the first time cond(gv) holds; then it stops. fire must be safe
// to call from another goroutine (Process's methods are). The watch is in
// place when OnGroup returns.
func (h *Harness) OnGroup(what string, cond func(httpapi.GroupView) error, fire func(httpapi.GroupView)) *Trigger {
	h.t.Helper()
	if _, err := h.Group(); err != nil { // opens the bucket before the goroutine uses it
		h.t.Fatalf("trigger on %s: %v", what, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w, err := h.kv.WatchAll(ctx, jetstream.UpdatesOnly())
	if err != nil {
		cancel()
		h.t.Fatalf("trigger on %s: watch the group's bucket: %v", what, err)
	}
	tr := &Trigger{what: what, done: make(chan struct{}), cancel: cancel, err: fmt.Errorf("not checked yet")}
	h.t.Cleanup(tr.Stop)
	go func() {
		defer func() { _ = w.Stop() }()
		tick := time.NewTicker(pollInterval)
		defer tick.Stop()
		for {
			gv, err := h.Group()
			if err == nil {
				err = cond(gv)
			}
			if err == nil {
				fire(gv)
				tr.gv = gv
				close(tr.done)
				return
			}
			tr.err = err
			select {
			case <-ctx.Done():
				close(tr.done)
				return
			case <-w.Updates():
			case <-tick.C:
			}
		}
	}()
	return tr
}

// Wait waits until the trigger has fired and returns the view it fired on;
// it fails the test if it has not fired within timeout.
func (tr *Trigger) Wait(h *Harness, timeout time.Duration) httpapi.GroupView {
	h.t.Helper()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-tr.done:
	case <-t.C:
		tr.cancel()
		<-tr.done
	}
	tr.cancel()
	if tr.gv.Generation == 0 {
		h.t.Fatalf("timed out after %s waiting for %s: %v", timeout, tr.what, tr.err)
	}
	h.Logf("%s: fired at generation %d", tr.what, tr.gv.Generation)
	return tr.gv
}

// Stop cancels the trigger if it has not fired; safe to call twice.
func (tr *Trigger) Stop() {
	tr.cancel()
	<-tr.done
}
