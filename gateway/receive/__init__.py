"""The receive path as a component: RTP of one Opus stream in, 20 ms of 24 kHz PCM out.

``ReceivePath`` (receive_path.py) wires it together: ``on_rtp``/``on_packet`` in, ``start()`` /
``close()``, ``pcm`` (pcm_source.py: a bounded ring to ``read()``/``await wait()``/``async for``,
or ``on_frame`` callbacks) out, ``stats``; ``ReceivePathConfig`` (receive_config.py) holds its
switches, with the recording and the period log off unless asked for. Its parts:

* jitter_buffer.py: adaptive, one slot per sequence number, each at its real duration (10-60 ms
  packets), pauses (DTX, mute: a timestamp jump with no sequence gap) told apart from loss;
  its window of slots in slot_window.py, its results and counters in jitter_types.py;
* loss_tracker.py: loss is a sequence gap, never a pause; the NACK generator is gateway.rtp's
  (retries 1.5 RTT apart, capped per second), nack_sender.py sends what it asks for when it is
  due (the component's one task);
* red_recovery.py: RFC 2198 RED (``on_packet(..., red=True)``, or ``red_payload_type`` for
  ``on_rtp``): the primary plays as a plain packet, the redundant copies (numbered by timestamp
  and duration) fill missing frames before NACK, FEC or PLC are tried; repair_floor.py: a stall
  that repairs ended is kept as jitter-buffer depth for a while;
* frame_decoder.py, opus_packet.py, sample_queue.py: Opus decoding with FEC/PLC at each slot's
  duration, cut into 20 ms periods;
* playout.py: the playout clock, a tick callback per period on the shared ticker
  (gateway.media.ticker), absolute schedule, a failing period counted and skipped;
* receive_stats.py, sliding_window.py: counters and delay trackers, sorted windows.

Used by the headless client (gateway.client) and by the WebRTC leg for the user's microphone
(full duplex). The jitter buffer's depth is set by depth_policy.py (the RED, repair and burst
floors) and kept at its target in pauses by level.py.

Layer: below tts/speech, above nack. May import nack, media, rtp, runtime.
"""
