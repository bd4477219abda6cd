package httpapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/handoffhq/handoff/httpapi/httpapitest"
)

// workerEvent is one call to a WorkerObserver.
type workerEvent struct {
	attached bool
	at       time.Time // the argument
	reported time.Time // when the call was made
}

// observer records the calls it gets.
type observer chan workerEvent

func (o observer) WorkerAttached(at time.Time) {
	o <- workerEvent{attached: true, at: at, reported: time.Now()}
}

func (o observer) WorkerDetached(since time.Time) {
	o <- workerEvent{attached: false, at: since, reported: time.Now()}
}

func (o observer) next(t *testing.T, attached bool) workerEvent {
	t.Helper()
	select {
	case e := <-o:
		if e.attached != attached {
			t.Fatalf("observer got attached=%v, want attached=%v", e.attached, attached)
		}
		return e
	case <-time.After(10 * time.Second):
		t.Fatalf("observer got nothing in 10s, want attached=%v", attached)
		return workerEvent{}
	}
}

func (o observer) none(t *testing.T) {
	t.Helper()
	select {
	case e := <-o:
		t.Fatalf("observer got %+v, want no call", e)
	default:
	}
}

// openPoll starts a long-poll that stays open until the returned func
// ends it (as a worker that goes away would) and waits for its end.
func openPoll(t *testing.T, h http.Handler, f *httpapitest.Backend) (end func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		req := httptest.NewRequest("GET", "/assignment?wait=60s&after=1", nil).WithContext(ctx)
		req.Host = "localhost:7070"
		h.ServeHTTP(httptest.NewRecorder(), req)
	}()
	awaitWaiting(t, f)
	return func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the long-poll did not end after its client went away")
		}
	}
}

func TestWorkerAttachesWithItsPollAndDetachesAfterTheGrace(t *testing.T) {
	f, obs := httpapitest.New(), make(observer, 8)
	const grace = 50 * time.Millisecond
	h := New(f, Options{Worker: obs, WorkerGrace: grace}).Handler()

	obs.none(t) // detached until the first poll
	before := time.Now()
	end := openPoll(t, h, f)
	if e := obs.next(t, true); e.at.Before(before) {
		t.Errorf("WorkerAttached(%v), want a time after the poll began (%v)", e.at, before)
	}
	end()
	ended := time.Now()
	e := obs.next(t, false)
	if e.at.After(ended) {
		t.Errorf("WorkerDetached(since %v), want the end of the last poll (at or before %v)", e.at, ended)
	}
	if d := e.reported.Sub(e.at); d < grace {
		t.Errorf("WorkerDetached reported %v after the poll ended, want at least the grace %v", d, grace)
	}

	// A worker that comes back attaches again.
	r := serve(h, "GET", "/assignment", nil, nil)
	if r.status != http.StatusOK {
		t.Fatalf("GET /assignment = %d %s", r.status, r.body)
	}
	obs.next(t, true)
	obs.next(t, false)
}

func TestWorkerPollingAgainWithinTheGraceStaysAttached(t *testing.T) {
	f, obs := httpapitest.New(), make(observer, 8)
	h := New(f, Options{Worker: obs, WorkerGrace: time.Minute}).Handler()

	end := openPoll(t, h, f)
	obs.next(t, true)
	end()
	for range 3 { // re-polls, as a worker does between long-polls
		serve(h, "GET", "/assignment", nil, nil)
	}
	end = openPoll(t, h, f)
	end()
	obs.none(t)
}

func TestWorkerDetachesOnlyOnceEveryPollEnded(t *testing.T) {
	f, obs := httpapitest.New(), make(observer, 8)
	s := New(f, Options{Worker: obs, WorkerGrace: 20 * time.Millisecond})
	h := s.Handler()

	end1 := openPoll(t, h, f)
	obs.next(t, true)
	end2 := openPoll(t, h, f)
	end1()
	s.worker.mu.Lock()
	open, graceRunning := s.worker.open, s.worker.timer != nil
	s.worker.mu.Unlock()
	if open != 1 || graceRunning {
		t.Fatalf("one of two polls ended: %d open, grace running %v; want 1 open and no grace running", open, graceRunning)
	}
	end2()
	obs.next(t, false)
	obs.none(t)
}

func TestNoWorkerObserverTracksNothing(t *testing.T) {
	f := httpapitest.New()
	h := New(f, Options{}).Handler()
	if r := serve(h, "GET", "/assignment", nil, nil); r.status != http.StatusOK {
		t.Fatalf("GET /assignment without a worker observer = %d %s", r.status, r.body)
	}
}

func TestRejectedPollsDoNotAttach(t *testing.T) {
	f, obs := httpapitest.New(), make(observer, 8)
	h := New(f, Options{Worker: obs, Token: "secret"}).Handler()
	for _, target := range []string{"/assignment", "/assignment?wait=soon"} {
		hdr := http.Header{}
		if target != "/assignment" {
			hdr.Set("Authorization", "Bearer secret")
		}
		if r := serve(h, "GET", target, nil, hdr); r.status == http.StatusOK {
			t.Fatalf("GET %s = 200, want a refusal", target)
		}
	}
	obs.none(t)
}

// A grace timer that fires just as a new poll begins (too late to be
// stopped) reports nothing.
func TestWorkerGraceTimerFiringLateReportsNothing(t *testing.T) {
	obs := make(observer, 8)
	tr := newWorkerTracker(obs, time.Minute)
	tr.begin()()
	obs.next(t, true)
	tr.mu.Lock()
	stale := tr.turn
	tr.mu.Unlock()
	end := tr.begin()
	tr.graceOver(stale)
	obs.none(t)
	end()
	tr.mu.Lock()
	current := tr.turn
	tr.mu.Unlock()
	tr.graceOver(current)
	obs.next(t, false)
}

// Once Run has stopped serving, the tracker reports nothing more: the
// polls that shutdown ends do not detach the worker after the server is
// gone.
func TestWorkerTrackerClosesWithRun(t *testing.T) {
	f, obs := httpapitest.New(), make(observer, 8)
	s := New(f, Options{Worker: obs, WorkerGrace: 10 * time.Millisecond})
	addr, cancel, ran := serving(t, s)
	polled := make(chan error, 1)
	go func() {
		resp, err := http.Get("http://" + addr + "/assignment?wait=60s&after=1")
		if err == nil {
			resp.Body.Close()
		}
		polled <- err
	}()
	awaitWaiting(t, f)
	obs.next(t, true)
	cancel()
	if err := <-ran; err != nil {
		t.Fatalf("Run = %v", err)
	}
	<-polled
	s.worker.mu.Lock()
	closed, graceRunning, turn := s.worker.closed, s.worker.timer != nil, s.worker.turn
	s.worker.mu.Unlock()
	if !closed || graceRunning {
		t.Errorf("after Run returned: tracker closed %v, grace running %v; want closed with no grace running", closed, graceRunning)
	}
	s.worker.graceOver(turn)
	obs.none(t)
}
