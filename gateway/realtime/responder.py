"""A Realtime session's responses, from ``response.create`` (or a turn's end) to
``response.done``: the agent asked with the items as history, its text written or its clauses
spoken, its tool calls as ``function_call`` items, a cut (``cancel``) and the events of each
step. Over a WebRTC call it also follows what plays (``on_speech_event``): a clause's
transcript delta when its utterance starts playing, ``output_audio_buffer.started`` /
``stopped``, and a cut reply truncated to what the call's sink sent.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from gateway.agent.base import AgentError, Message
from gateway.agent.openai_chat import ToolCallDelta
from gateway.conversation.conversation import Conversation
from gateway.conversation.events import Event
from gateway.realtime.agent_input import agent_input
from gateway.realtime.audio_formats import OutputEncoder
from gateway.realtime.config import SessionConfig, audio_format, modalities
from gateway.realtime.items import Item, Items, item_from_client
from gateway.realtime.prepared import PreparedReply
from gateway.realtime.protocol import ClientError, checked, new_id
from gateway.realtime.response import Clause, Hearing, Response, heard_transcript
from gateway.realtime.tools import chat_messages, chat_tool_choice, chat_tools
from gateway.speech.speaker import SpeechQueueFull
from gateway.text.streaming import stream_clauses
from gateway.tts.base import Synthesizer

TRANSCRIPT_WAIT_S = 30.0  # a response waits this long for its input's transcription

Emit = Callable[..., None]


class Responder:
    def __init__(self, conversation: Conversation, hearing: Hearing, config: SessionConfig,
                 items: Items, *, audio_out: str, emit: Emit,
                 spawn: Callable[[Any, str], asyncio.Task[Any]],
                 voice: Callable[[str, str | None], Synthesizer],
                 discard: Callable[[PreparedReply], None]) -> None:
        self.conversation = conversation
        self.hearing = hearing
        self.config = config  # the session's, updated in place by session.update
        self.items = items
        self.audio_out = audio_out  # "deltas" (WebSocket) or "rtp" (a WebRTC call)
        self._emit = emit
        self._spawn = spawn
        self._voice = voice
        self._discard = discard
        self.response: Response | None = None
        self.responses = {"completed": 0, "cancelled": 0, "failed": 0, "incomplete": 0}
        self.replies_prepared_used = 0
        self._by_utterance: dict[str, tuple[Response, Clause]] = {}
        self._playing: Response | None = None  # rtp: the response whose audio is playing

    @property
    def active(self) -> Response | None:
        """The response under way (None: none, or it is done)."""
        response = self.response
        return response if response is not None and not response.done else None

    def of_utterance(self, utterance_id: str) -> tuple[Response, Clause] | None:
        """The response and clause an utterance speaks (None: its response is over)."""
        return self._by_utterance.get(utterance_id)

    def create(self, raw: dict[str, Any], event_id: str | None) -> None:
        if self.response is not None and not self.response.done:
            raise ClientError("conversation_already_has_active_response", "Conversation already "
                              f"has an active response in progress: {self.response.id}. Wait "
                              "until the response is finished before creating a new one.",
                              None, event_id)
        self.start(raw, event_id)

    def start(self, raw: dict[str, Any], event_id: str | None,
                        prepared: PreparedReply | None = None) -> None:
        cfg = self.config
        mods = modalities(raw["output_modalities"], "response.output_modalities", event_id) \
            if raw.get("output_modalities") is not None else cfg.output_modalities
        instructions = checked(raw, "instructions", str, default=cfg.instructions)
        conversation = checked(raw, "conversation", str, default="auto")
        if conversation not in ("auto", "none"):
            raise ClientError("invalid_value", 'conversation must be "auto" or "none"',
                              "response.conversation", event_id)
        context = list(self.items)
        if raw.get("input") is not None:
            if not isinstance(raw["input"], list) or len(raw["input"]) > 64:
                raise ClientError("invalid_value", "input must be a list of items (64 at most)",
                                  "response.input", event_id)
            context = []
            for entry in raw["input"]:
                if isinstance(entry, dict) and entry.get("type") == "item_reference":
                    ref = self.items.get(str(entry.get("id")))
                    if ref is None:
                        raise ClientError("item_not_found", f"no item {entry.get('id')!r}",
                                          "response.input", event_id)
                    context.append(ref)
                else:
                    context.append(item_from_client(entry, event_id))
        audio = (raw.get("audio") or {}).get("output") or {}
        voice = self._voice(audio["voice"] if isinstance(audio.get("voice"), str)
                            else cfg.voice, event_id)
        fmt = cfg.output_format
        if audio.get("format") is not None:
            fmt = audio_format(audio["format"], "response.audio.output.format", event_id)
        item = Item(new_id("item"), "message", "assistant", [], status="in_progress")
        response = Response(new_id("resp"), item, mods, conversation, instructions, context,
                            fmt, voice, metadata=raw.get("metadata"))
        response.encoder = OutputEncoder(fmt["type"])
        tools = raw["tools"] if isinstance(raw.get("tools"), list) else cfg.tools
        choice = chat_tool_choice(raw.get("tool_choice", cfg.tool_choice))
        if tools and choice != "none" and hasattr(self.hearing.agent, "reply_with_tools"):
            response.tools, response.tool_choice = chat_tools(tools), choice
        if prepared is not None and response.tools:
            self._discard(prepared)  # prepared without the tools
            prepared = None
        response.prepared = prepared
        item.clauses = response.clauses
        self.response = response
        self._emit("response.created", response=response.as_json())
        self._emit("rate_limits.updated", rate_limits=[
            {"name": "requests", "limit": None, "remaining": None, "reset_seconds": None}])
        if not response.tools:
            self._open_message(response)  # with tools: once text comes (it may not)
        response.task = self._spawn(self._respond(response), "realtime-response")

    def _open_message(self, response: Response) -> None:
        item = response.item
        if item in response.outputs:
            return
        response.outputs.append(item)
        previous = self.items.add(item) if response.conversation == "auto" else None
        self._emit("response.output_item.added", response_id=response.id,
                   output_index=response.index(item), item=item.as_json())
        if response.conversation == "auto":
            self._emit("conversation.item.added", previous_item_id=previous,
                       item=item.as_json())
        item.content.append(response.content())
        self._emit("response.content_part.added", response_id=response.id, item_id=item.id,
                   output_index=response.index(item), content_index=0, part=response.part())

    def _tool_delta(self, response: Response, delta: ToolCallDelta) -> None:
        call = response.calls.get(delta.index)
        if call is None:
            if len(response.calls) >= 16:
                return  # a bound: at most 16 calls in one response
            call = Item(new_id("item"), "function_call", call_id=delta.id or new_id("call"),
                        name=delta.name or "", arguments="", status="in_progress")
            response.calls[delta.index] = call
            response.outputs.append(call)
            previous = self.items.add(call) if response.conversation == "auto" else None
            self._emit("response.output_item.added", response_id=response.id,
                       output_index=response.index(call), item=call.as_json())
            if response.conversation == "auto":
                self._emit("conversation.item.added", previous_item_id=previous,
                           item=call.as_json())
        if delta.name and not call.name:
            call.name = delta.name
        if delta.arguments and len(call.arguments or "") < 65_536:
            call.arguments = (call.arguments or "") + delta.arguments
            self._emit("response.function_call_arguments.delta", response_id=response.id,
                       item_id=call.id, output_index=response.index(call),
                       call_id=call.call_id, delta=delta.arguments)

    async def _texts(self, response: Response) -> AsyncIterator[str]:
        """The agent's reply with tools: its text pieces (the message opened on the first),
        its tool calls handled on the way."""
        agent: Any = self.hearing.agent
        own = {i.id for i in response.outputs} | {response.item.id}
        messages = chat_messages(response.context, response.instructions, own)
        stream = agent.reply_with_tools(messages, response.tools, response.tool_choice)
        async with contextlib.aclosing(stream) as pieces:
            async for piece in pieces:
                if response.done:
                    return
                if isinstance(piece, str):
                    if piece:
                        self._open_message(response)
                        yield piece
                else:
                    self._tool_delta(response, piece)

    def _agent_input(self, response: Response) -> tuple[str, list[Message]]:
        return agent_input(response.context, response.instructions, response.item)

    async def _respond(self, response: Response) -> None:
        pending = [i.transcribed for i in response.context
                   if i.transcribed is not None and not i.transcribed.done()]
        if response.prepared is not None and not response.audio:
            self._discard(response.prepared)
            response.prepared = None
        if pending and response.prepared is None:
            await asyncio.wait(pending, timeout=TRANSCRIPT_WAIT_S)
        text, history = self._agent_input(response)
        pieces: AsyncIterator[str] = self._texts(response) if response.tools \
            else self.hearing.agent.reply(text, history)
        try:
            if response.audio:
                await self._speak(response, pieces)
            else:
                await self._write(response, pieces)
        except AgentError as exc:
            if not response.done:
                self._finish(response, "failed", {"type": "failed", "error": {
                    "type": "server_error", "code": "agent_failed", "message": str(exc)}})
            return
        if not response.done:
            self._finish(response, "completed")

    async def _write(self, response: Response, stream: AsyncIterator[str]) -> None:
        async with contextlib.aclosing(stream) as pieces:
            async for piece in pieces:
                if response.done:
                    return
                response.text.append(piece)
                self._emit("response.output_text.delta", response_id=response.id,
                           item_id=response.item.id, output_index=response.index(response.item),
                           content_index=0, delta=piece)

    async def _speak(self, response: Response, pieces: AsyncIterator[str]) -> None:
        prepared = response.prepared
        if prepared is None:
            stream = stream_clauses(pieces)
        else:
            stream = prepared.clauses
            with contextlib.suppress(Exception):
                await pieces.aclose()  # type: ignore[attr-defined]  # never started
        async with contextlib.aclosing(stream) as clauses:
            if prepared is not None:
                try:
                    if prepared.task is not None:
                        await prepared.task  # the first clause (an AgentError is the agent's)
                    if prepared.first is not None and not response.done:
                        self.replies_prepared_used += 1
                        self._say(response, prepared.first, prepared.take_prerender())
                finally:
                    leftover = prepared.take_prerender()
                    if leftover is not None:
                        leftover.cancel()
            async for clause in clauses:
                if response.done:
                    return
                self._say(response, clause)
        for entry in list(response.clauses):
            await entry.utterance.finished.wait()
            if response.done:
                return

    def _say(self, response: Response, clause: str, prerendered: Any = None) -> None:
        try:
            utterance = self.conversation.say(clause, response.voice, prerendered=prerendered)
        except SpeechQueueFull:
            if prerendered is not None:
                prerendered.cancel()
            return
        entry = Clause(clause, utterance)
        response.clauses.append(entry)
        self._by_utterance[utterance.id] = (response, entry)

    def cancel(self, response: Response, reason: str, emit: bool = True) -> None:
        if response.done:
            return
        self.conversation.interrupt()  # the speaker's queue and our sink emptied at once
        if response.task is not None and response.task is not asyncio.current_task():
            response.task.cancel()  # closes the agent's stream and its upstream request
        self._finish(response, "cancelled", {"type": "cancelled", "reason": reason}, emit)
        if self.audio_out == "rtp" and response.audio and emit:
            heard_ms = response.item.audio_ms
            if self._playing is response:
                self._playing = None
                self._emit("output_audio_buffer.cleared", response_id=response.id)
            if response.conversation == "auto" and heard_ms > 0:
                self._emit("conversation.item.truncated", item_id=response.item.id,
                           content_index=0, audio_end_ms=round(heard_ms))

    def _finish(self, response: Response, status: str,
                details: dict[str, Any] | None = None, emit: bool = True) -> None:
        response.status = status
        response.status_details = details
        self.responses[status] = self.responses.get(status, 0) + 1
        for clause in response.clauses:
            self._by_utterance.pop(clause.utterance.id, None)
        item = response.item
        final = "completed" if status == "completed" else "incomplete"
        if item in response.outputs:
            item.status = final
            item.content[0] = response.content()
            if self.audio_out == "rtp":  # what the call's sink sent is what was heard
                for clause in response.clauses:
                    clause.audio_ms = clause.utterance.frames_sent * 20.0
                item.audio_ms = sum(c.audio_ms for c in response.clauses)
                if status == "cancelled":
                    item.content[0]["transcript"] = heard_transcript(response.clauses,
                                                                     item.audio_ms)
        for call in response.calls.values():
            call.status = final
        if not emit:
            return
        for output in response.outputs:
            index = response.index(output)
            if output is item:
                ids = {"response_id": response.id, "item_id": item.id, "output_index": index,
                       "content_index": 0}
                if response.audio:
                    self._emit("response.output_audio.done", **ids)
                    self._emit("response.output_audio_transcript.done", **ids,
                               transcript=response.transcript)
                else:
                    self._emit("response.output_text.done", **ids, text=response.transcript)
                self._emit("response.content_part.done", **ids, part=response.part())
            else:
                self._emit("response.function_call_arguments.done", response_id=response.id,
                           item_id=output.id, output_index=index, call_id=output.call_id,
                           name=output.name, arguments=output.arguments or "")
            self._emit("response.output_item.done", response_id=response.id,
                       output_index=index, item=output.as_json())
            if response.conversation == "auto":
                self._emit("conversation.item.done", item=output.as_json())
        self._emit("response.done", response=response.as_json())
        if self.audio_out == "rtp" and self._playing is response and status != "cancelled":
            self._playing = None
            self._emit("output_audio_buffer.stopped", response_id=response.id)

    # -- playing (rtp) ---------------------------------------------------------------------------
    def on_speech_event(self, event: Event) -> None:
        """rtp: an utterance started playing on the call -> its clause's transcript delta."""
        if event.type != "utterance" or event.data.get("state") != "playing":
            return
        found = self._by_utterance.get(event.data.get("id", ""))
        if found is None:
            return
        response, clause = found
        if response.done or clause.sent:
            return
        if self._playing is not response:
            self._playing = response
            self._emit("output_audio_buffer.started", response_id=response.id)
        self.transcript_delta(response, clause)

    def transcript_delta(self, response: Response, clause: Clause) -> None:
        clause.sent = True
        spoken = [c for c in response.clauses if c.sent]
        self._emit("response.output_audio_transcript.delta", response_id=response.id,
                   item_id=response.item.id, output_index=response.index(response.item),
                   content_index=0,
                   delta=clause.text if len(spoken) == 1 else " " + clause.text)
