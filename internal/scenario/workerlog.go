package scenario

import (
	"encoding/json"
	"sync"
)

// workerLog is a counter worker's own log (its stderr) as it grows, across
// restarts: it counts the worker's starts, so that a member is started only
// once its worker is connected to NATS and reads the input stream.
type workerLog struct {
	r lineReader

	mu      sync.Mutex
	started int
}

func newWorkerLog(path string) *workerLog {
	l := &workerLog{}
	l.r = lineReader{Path: path, Parse: l.add}
	return l
}

func (l *workerLog) add(line []byte) error {
	var w struct {
		Message string `json:"message"`
	}
	if err := json.Unmarshal(line, &w); err != nil {
		return err
	}
	if w.Message == "counter started" {
		l.mu.Lock()
		l.started++
		l.mu.Unlock()
	}
	return nil
}

// starts returns how many times the worker has logged that it started.
func (l *workerLog) starts() int {
	_ = l.r.Refresh()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.started
}
