package pull

import "github.com/sluice-scm/sluice/internal/notify"

// Notifier hears the events people are told about (a review requested, a
// comment, a merge, a decline): notify.Service, handed in by app. Who
// hears of them, and how, is its business.
type Notifier interface {
	Notify(ev notify.Event)
}

// notify tells the notifier, if there is one, of ev.
func (s *Service) notify(ev notify.Event) {
	if s.notifier != nil {
		s.notifier.Notify(ev)
	}
}
