package kit

import "sync"

// queue holds keys to handle: a key is in it at most once, is handed to one
// worker at a time, and a key added while it is handled is handled once more
// afterwards (the shape of client-go's workqueue).
type queue struct {
	mu         sync.Mutex
	cond       *sync.Cond
	order      []string
	dirty      map[string]bool
	processing map[string]bool
	closed     bool
}

func newQueue() *queue {
	q := &queue{dirty: map[string]bool{}, processing: map[string]bool{}}
	q.cond = sync.NewCond(&q.mu)
	return q
}

func (q *queue) add(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed || q.dirty[key] {
		return
	}
	q.dirty[key] = true
	if q.processing[key] {
		return
	}
	q.order = append(q.order, key)
	q.cond.Signal()
}

// get blocks until a key is ready or the queue is closed.
func (q *queue) get() (string, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.order) == 0 && !q.closed {
		q.cond.Wait()
	}
	if q.closed {
		return "", false
	}
	key := q.order[0]
	q.order = q.order[1:]
	delete(q.dirty, key)
	q.processing[key] = true
	return key, true
}

func (q *queue) finish(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.processing, key)
	if q.dirty[key] {
		q.order = append(q.order, key)
		q.cond.Signal()
	}
}

func (q *queue) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	q.cond.Broadcast()
}

// inHand returns how many keys are being handled.
func (q *queue) inHand() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.processing)
}
