"""The hand-written ring's picture names what each message carried, from the recorded send."""

from disttrace.tracer.analysis.core.results import P2PMatch
from disttrace.tui.model.ring import p2p_steps
from disttrace.tui.widgets.ring import _short


def test_p2p_steps_keep_the_send_of_each_message():
    matches = [P2PMatch(0, 1, 0, send=10, recv=11, bytes=8, late_sender_ns=0, late_receiver_ns=0, transfer_ns=5),
               P2PMatch(1, 0, 0, send=12, recv=13, bytes=8, late_sender_ns=0, late_receiver_ns=0, transfer_ns=5)]
    (step,) = p2p_steps(matches, [0, 1])
    assert [(t.src, t.dst, t.send_row) for t in step.transfers] == [(0, 1, 10), (1, 0, 12)]


def test_recorded_values_are_shown_compactly():
    assert _short([103.0, 104.0]) == "[103, 104]"
    assert _short([[1.0, 2.0], [3.5]]) == "[1, 2, 3.5]"
    assert _short(list(range(100)), limit=12) == "[0, 1, 2, …]"


def test_steps_are_named_with_english_ordinals():
    from disttrace.tracer.units import fmt_ordinal
    assert [fmt_ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 102, 111, 113)] == \
        ["1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "102nd", "111th", "113th"]
