package framework

// ProfileRunResult is what one scheduling profile picked: ordered target endpoints, the first is
// the pick and the rest are fallbacks.
type ProfileRunResult struct {
	TargetEndpoints []*Endpoint
	// Candidates are every endpoint that passed the profile's filters with its score: the sum
	// over the profile's scorers of weight × the scorer's score clamped to [0,1], not normalised
	// (llm-d-router v0.10.0 scheduling/scheduler_profile.go runScorerPlugins and
	// runPickerPlugin's ScoredCandidates). The scheduler sets it after the picker ran; a picker
	// need not.
	Candidates []ScoredEndpoint
}

// SchedulingResult is the result of one scheduling cycle: the results of every profile that ran
// and the name of the primary profile, whose first target is where the request goes.
type SchedulingResult struct {
	ProfileResults     map[string]*ProfileRunResult
	PrimaryProfileName string
	// RequestHeaders are headers the profile handler asks to set on the forwarded request, keys
	// lower case (for example disagg-profile-handler's x-prefiller-host-port). Upstream plugins
	// write them into the request's headers and GIE v1.5.0 sets every non-system header back
	// (pkg/epp/handlers/request.go generateHeaders); eppkit names them explicitly instead.
	RequestHeaders map[string]string
}

// Primary returns the primary profile's result, or nil.
func (r *SchedulingResult) Primary() *ProfileRunResult {
	if r == nil {
		return nil
	}
	return r.ProfileResults[r.PrimaryProfileName]
}

// WeightedScorer is a scorer with its weight in a profile.
type WeightedScorer struct {
	Scorer
	Weight float64
}

// SchedulerProfile is one named scheduling profile: filters run in order, then the weighted
// scorers, then the picker.
type SchedulerProfile struct {
	Name    string
	Filters []Filter
	Scorers []WeightedScorer
	Picker  Picker
}
