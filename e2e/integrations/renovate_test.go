package integrations_test

import "testing"

func (s *suite) renovate(t *testing.T) { t.Skip("todo") }
