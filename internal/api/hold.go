package api

import "net/http"

// archiveHold is how much of an archive is held back before the response
// starts. Git's zip writer sends each small entry as soon as it is read,
// so without it a read bound hit at a big file after a few small ones
// would leave a 200 already sent; held, such a failure still answers 413
// with the reason.
const archiveHold = 1 << 20

// holdWriter holds the first bytes of a streamed body so that a failure
// before they fill can still be answered with an error status.
type holdWriter struct {
	w       http.ResponseWriter
	buf     []byte
	started bool
}

func (h *holdWriter) Write(p []byte) (int, error) {
	if h.started {
		return h.w.Write(p)
	}
	h.buf = append(h.buf, p...)
	if len(h.buf) >= archiveHold {
		if err := h.flush(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// flush sends what is held and streams from then on.
func (h *holdWriter) flush() error {
	h.started = true
	_, err := h.w.Write(h.buf)
	h.buf = nil
	return err
}

// finish ends the body after the streaming function returned err: with
// nothing sent yet, err is returned for the caller to answer; after the
// response started, the connection is cut (http.ErrAbortHandler) so the
// client sees a broken transfer instead of a complete-looking archive.
func (h *holdWriter) finish(err error) error {
	switch {
	case err == nil:
		return h.flush()
	case !h.started:
		return err
	}
	panic(http.ErrAbortHandler)
}
