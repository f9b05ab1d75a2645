/**
 * The left-sidebar panel: a Lumino widget that renders the React views and tells the model
 * when it is visible (the model polls fast only then) and how wide the charts are.
 */
import { ReactWidget } from '@jupyterlab/ui-components';
import { Message } from '@lumino/messaging';
import { ISignal } from '@lumino/signaling';
import { Widget } from '@lumino/widgets';
import * as React from 'react';

import { ClusterModel } from '../cluster/clusterModel';
import { ClusterView, PanelView, ViewSwitch } from '../cluster/clusterView';
import { IViewContext, SidebarView } from '../cards/components';
import { gpuIcon } from './icons';
import { GpuModel } from '../gpus/model';
import { FALLBACK_PALETTE, IPalette, readPalette } from '../charts/palette';
import { IKernelActions } from '../processes/processActions';
import { MetricChoice } from '../gpus/settings';
import { ContainerPidsNote } from '../processes/containerPids';
import { BillSource, NotebookBill } from '../cells/bill';

export namespace GpuSidebar {
  export interface IOptions {
    model: GpuModel;
    /** Open a file of the server's root (a process's notebook). */
    openPath: (path: string) => void;
    /** JupyterLab's theme changes (IThemeManager.themeChanged): charts re-read colours. */
    themeChanged?: ISignal<unknown, unknown> | null;
    /** The Cluster view's model; the switch shows once it says a Prometheus is configured. */
    cluster?: ClusterModel | null;
    /** The kernel buttons of process rows (kernelActions.ts). */
    kernelActions?: IKernelActions | null;
    /** Copy text to the clipboard (the free GPUs' CUDA_VISIBLE_DEVICES). */
    copy?: ((text: string) => void) | null;
    /** The active notebook's cells that used a GPU ("This notebook", cells/bill.tsx). */
    bill?: BillSource | null;
  }
}

/** Horizontal space around a chart inside the panel (card padding and border, the y-scale words). */
const CHART_INSET_PX = 34 + 46;

export class GpuSidebar extends ReactWidget {
  constructor(options: GpuSidebar.IOptions) {
    super();
    this.id = 'gpu-widgets-sidebar';
    this.addClass('jp-GpuWidgets');
    this.addClass('jp-GpuWidgets-sidebar');
    this.title.icon = gpuIcon;
    this.title.caption = 'GPU Dashboard';
    this.node.setAttribute('role', 'region');
    this.node.setAttribute('aria-label', 'GPU Dashboard');
    this._model = options.model;
    this._openPath = options.openPath;
    this._kernelActions = options.kernelActions ?? null;
    this._copy = options.copy ?? null;
    this._bill = options.bill ?? null;
    this._model.changed.connect(this._onModelChanged, this);
    this._cluster = options.cluster ?? null;
    this._cluster?.changed.connect(this._onClusterChanged, this);
    options.themeChanged?.connect(this._onThemeChanged, this);
  }

  get model(): GpuModel {
    return this._model;
  }

  /** The view shown: this machine's GPUs, or the cluster's (only when one is configured). */
  get view(): PanelView {
    return this._cluster?.offered ? this._view : 'local';
  }

  set view(view: PanelView) {
    this._view = view;
    this._syncVisible();
    this.update();
  }

  /** Show this machine's view with `index`'s card (an alert's "Show GPU"; the caller reveals the panel). */
  showGpu(index: number): void {
    this._focus = { index, seq: (this._focus?.seq ?? 0) + 1 };
    this.view = 'local';
  }

  /** The raw `metrics` setting, resolved against the server's catalogue when drawn. */
  get metricsSetting(): unknown {
    return this._metrics.setting;
  }

  set metricsSetting(value: unknown) {
    this._metrics.setting = value;
    this.update();
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    window.clearTimeout(this._themeTimer);
    this._model.setPanelVisible(false);
    this._cluster?.setVisible(false);
    super.dispose();
  }

  protected render(): JSX.Element {
    const ctx: IViewContext = {
      model: this._model,
      metrics: this._model.catalogue ? this._metrics.select(this._model.catalogue.sidebar) : [],
      palette: this._palette,
      openPath: this._openPath,
      kernelActions: this._kernelActions,
      copy: this._copy,
      focus: this._focus
    };
    const view = this.view;
    const versionProblem = this._model.versionProblem;
    return (
      <>
        {versionProblem && <VersionNotice text={versionProblem} />}
        {view === 'local' && this._model.status?.processes_note && (
          <ContainerPidsNote text={this._model.status.processes_note} />
        )}
        {this._cluster?.offered && <ViewSwitch view={view} onChange={v => (this.view = v)} />}
        {view === 'cluster' ? <ClusterView model={this._cluster!} palette={this._palette} /> : <SidebarView {...ctx} />}
        {view === 'local' && this._bill && <NotebookBill source={this._bill} />}
      </>
    );
  }

  protected onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    this._readPalette();
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    this._measure();
    this._syncVisible();
    this.update();
  }

  protected onAfterHide(msg: Message): void {
    super.onAfterHide(msg);
    this._syncVisible();
  }

  /** Only the view on screen polls fast (the GPU model still feeds the status bar). */
  private _syncVisible(): void {
    const view = this.view;
    this._model.setPanelVisible(this.isVisible && view === 'local');
    this._cluster?.setVisible(this.isVisible && view === 'cluster');
  }

  protected onResize(msg: Widget.ResizeMessage): void {
    super.onResize(msg);
    this._measure();
  }

  private _measure(): void {
    const width = this.node.clientWidth;
    if (width > 0) {
      this._model.setChartWidth(width - CHART_INSET_PX);
    }
  }

  private _onModelChanged(): void {
    // Hidden: nothing to draw (the status bar has its own view); shown again: onAfterShow.
    // The cluster view shows nothing of the model's but the version notice.
    const noticeChanged = this._model.versionProblem !== this._versionSeen;
    this._versionSeen = this._model.versionProblem;
    if (this.isVisible && (this.view === 'local' || noticeChanged)) {
      this.update();
    }
  }

  private _onClusterChanged(): void {
    // The switch appears with the first answer, whichever view is shown.
    if (this.isVisible) {
      this.update();
    }
  }

  private _onThemeChanged(): void {
    // The new theme's CSS may land a moment after the signal: read now and once more later.
    this._readPalette();
    window.clearTimeout(this._themeTimer);
    this._themeTimer = window.setTimeout(() => this._readPalette(), 400);
  }

  private _readPalette(): void {
    if (!this.isAttached) {
      return;
    }
    const next = readPalette(this.node);
    if (JSON.stringify(next) !== JSON.stringify(this._palette)) {
      this._palette = next;
      this.update();
    }
  }

  private _bill: BillSource | null;
  private _cluster: ClusterModel | null;
  private _copy: ((text: string) => void) | null;
  private _focus: { index: number; seq: number } | null = null;
  private _kernelActions: IKernelActions | null;
  private _metrics = new MetricChoice();
  private _model: GpuModel;
  private _openPath: (path: string) => void;
  private _palette: IPalette = FALLBACK_PALETTE;
  private _themeTimer = 0;
  private _versionSeen: string | null = null;
  private _view: PanelView = 'local';
}

/** Above either view: the server runs another gpu-widgets than this page (version.ts). */
function VersionNotice(props: { text: string }): JSX.Element {
  return (
    <div
      className="jp-GpuWidgets-message jp-mod-warn jp-GpuWidgets-versionNotice"
      role="alert"
      aria-label="gpu-widgets versions differ"
    >
      <h3 className="jp-GpuWidgets-messageTitle">gpu-widgets versions differ</h3>
      <div className="jp-GpuWidgets-messageBody">{props.text}</div>
    </div>
  );
}

