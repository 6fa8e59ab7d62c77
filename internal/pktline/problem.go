package pktline

import (
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sluice-scm/sluice/internal/problem"
)

// ErrorForm is how an error reaches a git client. Which one a transport
// uses depends on where in the conversation it is; what the user reads is
// the same in every form (ErrorText).
type ErrorForm int

const (
	// AsERR is an "ERR <text>" pkt-line, for a client reading pkt-lines
	// outside a side-band stream (a ref advertisement, a v2 command, a
	// push without side-band). git prints "remote error: <text>" and
	// stops. It is one line: line breaks become spaces.
	AsERR ErrorForm = iota
	// AsBand3 is one packet on the error band of a side-band stream. git
	// prints "remote: <text>" and fails. git ends the line itself, so a
	// trailing newline (which would print an empty line) is dropped.
	AsBand3
	// AsText is the text and a newline, for the stderr of an SSH session,
	// which git prints as it is.
	AsText
)

// ErrorText is what a git client is shown for err: the user-facing message
// (problem.Message: an internal error's details stay in the log) and, when
// err says when trying again makes sense, " (retry in Ns)". It is the one
// rendering of a problem for git, so a busy server reads the same over
// HTTP, SSH, before git started and after.
func ErrorText(err error) string {
	msg := problem.Message(err)
	if ra := problem.RetryAfter(err); ra > 0 {
		msg += " (retry in " + strconv.Itoa(ra) + "s)"
	}
	return msg
}

// WriteProblem tells a git client why its request failed, in form. It
// writes one packet (or one text) and no flush: a caller ending a
// response writes that itself.
func WriteProblem(w io.Writer, form ErrorForm, err error) error {
	text := ErrorText(err)
	switch form {
	case AsBand3:
		text = strings.TrimRight(strings.ReplaceAll(text, "\x00", " "), "\r\n")
		return writePacket(w, []byte{BandError}, []byte(cutText(text, Sideband64kMax)))
	case AsText:
		_, werr := io.WriteString(w, text+"\n")
		return werr
	default:
		return WriteError(w, text)
	}
}

// cutText shortens s to at most n bytes without splitting a UTF-8 sequence.
func cutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
