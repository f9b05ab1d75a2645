/**
 * The `metrics` setting in JupyterLab's Settings Editor: one labelled checkbox per metric of
 * the server's catalogue, instead of the form's default, an unlabelled Ctrl-click list of ids.
 * The setting keeps its shape (a list of metric ids; unset shows every metric, new ones too).
 *
 * The catalogue comes from the model (the server's `GET metrics`): the schema cannot list the
 * metrics, since a metric added on the server must need no front-end change.
 */
import type { IFormRenderer } from '@jupyterlab/ui-components';
import * as React from 'react';

import { GpuModel } from '../gpus/model';
import { IMetricInfo } from '../api/tokens';

/** What the Settings Editor's form (rjsf) hands a field renderer; only what is used here. */
interface IFieldProps {
  formData?: unknown;
  onChange: (value: unknown) => void;
  schema: { title?: string };
  idSchema?: { $id?: string };
  /** The editor's context: it holds the plugin's settings (JupyterLab's SettingsFormEditor). */
  registry?: { formContext?: { settings?: ISettings } };
  formContext?: { settings?: ISettings };
}

/** The part of ISettingRegistry.ISettings used here. */
interface ISettings {
  set(key: string, value: string[]): Promise<void>;
  remove(key: string): Promise<void>;
}

/** The ids a raw setting names, or null for "every metric" (unset or not a list). */
export function chosenIds(value: unknown): string[] | null {
  return Array.isArray(value) ? value.filter((id): id is string => typeof id === 'string') : null;
}

/** The setting after a metric's box is ticked or cleared, in the catalogue's order. */
export function toggled(value: unknown, id: string, on: boolean, offered: readonly IMetricInfo[]): string[] {
  const now = chosenIds(value) ?? offered.map(m => m.id);
  const next = new Set(on ? [...now, id] : now.filter(x => x !== id));
  // Ids the catalogue does not offer (yet) are kept: the server may offer them later.
  return [...offered.map(m => m.id).filter(x => next.has(x)), ...[...next].filter(x => !offered.some(m => m.id === x))];
}

/** A renderer for `IFormRendererRegistry.addRenderer('<plugin id>.metrics', ...)`. */
export function metricsFieldRenderer(model: GpuModel): IFormRenderer {
  const field = (props: IFieldProps): JSX.Element => <MetricsField {...props} model={model} />;
  return { fieldRenderer: field as unknown as IFormRenderer['fieldRenderer'] };
}

function MetricsField(props: IFieldProps & { model: GpuModel }): JSX.Element {
  const { model, formData, schema } = props;
  const settings = props.registry?.formContext?.settings ?? props.formContext?.settings ?? null;
  const onChange = (value: string[] | undefined): void => {
    props.onChange(value);
    // The editor saves a change only when some setting differs from its schema default, and
    // `metrics` has none (unset means every metric): write it ourselves, or a first change
    // of this setting alone would be dropped.
    void (value === undefined ? settings?.remove('metrics') : settings?.set('metrics', value))?.catch(reason =>
      console.error('gpu-widgets: could not save the `metrics` setting.', reason)
    );
  };
  // Re-render when the catalogue arrives (the editor may open before the first answer).
  const [, setTick] = React.useState(0);
  React.useEffect(() => {
    const bump = (): void => setTick(t => t + 1);
    model.changed.connect(bump);
    return () => {
      model.changed.disconnect(bump);
    };
  }, [model]);
  const offered = model.catalogue?.sidebar ?? [];
  const ids = chosenIds(formData);
  const id = props.idSchema?.$id ?? 'gpu-widgets-metrics';
  return (
    // The editor writes the schema's description under the field itself.
    <fieldset className="jp-GpuWidgets-metricsSetting" id={id}>
      <legend className="jp-FormGroup-fieldLabel jp-FormGroup-contentItem">{schema.title ?? 'Metrics shown'}</legend>
      <label className="jp-GpuWidgets-metricsSettingAll">
        <input type="checkbox" checked={ids === null} onChange={e => onChange(e.target.checked ? undefined : offered.map(m => m.id))} />
        Every metric the server offers (new ones too)
      </label>
      {offered.length ? (
        <ul className="jp-GpuWidgets-metricsSettingList">
          {offered.map(m => (
            <li key={m.id}>
              <label title={m.help}>
                <input
                  type="checkbox"
                  checked={ids === null || ids.includes(m.id)}
                  onChange={e => onChange(toggled(formData, m.id, e.target.checked, offered))}
                />
                {m.label} <span className="jp-GpuWidgets-muted">({m.id})</span>
              </label>
            </li>
          ))}
        </ul>
      ) : (
        <p className="jp-GpuWidgets-muted">
          The server's metric list is not read yet (is the gpu_widgets server extension enabled?). Chosen now:{' '}
          {ids === null ? 'every metric' : ids.join(', ') || 'none'}.
        </p>
      )}
    </fieldset>
  );
}
