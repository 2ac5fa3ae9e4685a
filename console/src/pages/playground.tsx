import { useEffect, useRef, useState } from 'preact/hooks';
import { api, errorText, request } from '../api.js';
import { ErrorMessage } from '../components.js';
import { sseData } from '../sse.js';
import type { Ctx } from './ctx.js';

interface Message {
  role: 'user' | 'assistant';
  content: string;
}

/** Chat with a model of the account's catalogue, the answer streamed as it comes; Stop aborts it. */
export function PlaygroundPage({ ctx }: { ctx: Ctx }) {
  const [models, setModels] = useState<string[]>([]);
  const [model, setModel] = useState('');
  const [messages, setMessages] = useState<Message[]>([]);
  const [draft, setDraft] = useState('');
  const [error, setError] = useState<string | null>(null);
  const [streaming, setStreaming] = useState(false);
  const abort = useRef<AbortController | null>(null);

  useEffect(() => {
    api<{ data: Array<{ id: string; type: string }> }>('GET', '/v1/models').then(
      (answer) => {
        const ids = answer.data.filter((m) => m.type === 'text').map((m) => m.id);
        setModels(ids);
        setModel(
          (current) => current || (ids.includes('gantry/local-chat') ? 'gantry/local-chat' : (ids[0] ?? '')),
        );
      },
      (err) => setError(errorText(err)),
    );
    return () => abort.current?.abort();
  }, []);

  if (ctx.session.role !== 'owner') {
    return (
      <section>
        <h1>Playground</h1>
        <p>The playground calls models as an account: sign in with one of the account's keys.</p>
      </section>
    );
  }

  const send = async (event: Event) => {
    event.preventDefault();
    const text = draft.trim();
    if (!text || streaming) return;
    const history: Message[] = [...messages, { role: 'user', content: text }];
    setMessages([...history, { role: 'assistant', content: '' }]);
    setDraft('');
    setError(null);
    setStreaming(true);
    const controller = new AbortController();
    abort.current = controller;
    let answer = '';
    try {
      const res = await request(
        'POST',
        '/v1/chat/completions',
        { model, messages: history, stream: true },
        controller.signal,
      );
      if (!res.ok || !res.body) {
        const body = (await res.json().catch(() => null)) as { error?: { message?: string } } | null;
        throw new Error(body?.error?.message ?? `HTTP ${res.status}`);
      }
      for await (const data of sseData(res.body)) {
        if (data === '[DONE]') break;
        const chunk = JSON.parse(data) as {
          choices?: Array<{ delta?: { content?: string | null } }>;
          error?: { message?: string };
        };
        if (chunk.error) throw new Error(chunk.error.message ?? 'The stream failed');
        answer += chunk.choices?.[0]?.delta?.content ?? '';
        setMessages([...history, { role: 'assistant', content: answer }]);
      }
    } catch (err) {
      if (!controller.signal.aborted) setError(errorText(err));
    } finally {
      setStreaming(false);
      abort.current = null;
    }
  };

  return (
    <section>
      <h1>Playground</h1>
      <label for="model">Model</label>{' '}
      <select id="model" value={model} onChange={(e) => setModel((e.target as HTMLSelectElement).value)}>
        {models.map((m) => (
          <option key={m}>{m}</option>
        ))}
      </select>
      <ol class="messages" aria-live="polite">
        {messages.map((m, i) => (
          <li key={i} class={`message ${m.role}`}>
            <strong>{m.role === 'user' ? 'You' : model}</strong>
            <p>{m.content || (streaming && i === messages.length - 1 ? '…' : '')}</p>
          </li>
        ))}
      </ol>
      <ErrorMessage error={error} />
      <form onSubmit={send} class="composer">
        <label for="prompt">Message</label>
        <textarea
          id="prompt"
          rows={3}
          value={draft}
          onInput={(e) => setDraft((e.target as HTMLTextAreaElement).value)}
          onKeyDown={(e) => {
            if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) send(e);
          }}
        />
        <p class="actions">
          <button type="submit" class="primary" disabled={streaming || !model}>
            Send
          </button>
          <button type="button" disabled={!streaming} onClick={() => abort.current?.abort()}>
            Stop
          </button>
          <button type="button" disabled={streaming} onClick={() => setMessages([])}>
            Clear
          </button>
        </p>
      </form>
    </section>
  );
}
